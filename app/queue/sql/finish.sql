-- How an attempt ends: done, retry, dead, cancelled, released or waiting, for many runs of one worker
-- in one statement (River's JobSetStateIfRunningMany). Fenced: a run changes only while it is
-- leased under the claim's own lease_id, and a run missing from the result lost its lease
-- (nothing was written for it). Each run gets its buffered events, then the event that
-- announces its new status, whoever writes that status (the reaper and the API write the same).
--
-- Two statements, chosen per batch by app/queue/finish.py: finish_if_leased for a batch whose runs
-- open no wait, add no thread message and report no usage (most batches: a run pays only for
-- what it uses), and finish_if_leased_with_extras for the others. Both are assembled from the
-- ending_* parts below, so an ending is written once.

-- part: ending_input
-- Defines f: one row per ending; n is how many buffered events the run has (counted by the
-- worker, so no statement counts them again).
f AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[]), CAST(:endings AS text[]),
                         CAST(:outputs AS jsonb[]), CAST(:error_codes AS text[]),
                         CAST(:error_messages AS text[]), CAST(:event_counts AS int[]))
        AS f(run_id, lease_id, ending, output, error_code, error_message, n)
)

-- part: ending_leased
-- The runs of f still leased under their lease, as r (the statement locks them in id order, as
-- append_events_if_leased and renew_leases lock them).
SELECT r.id, r.locked_by FROM agent_runs r JOIN f ON f.run_id = r.id
 WHERE r.lease_id = f.lease_id AND r.status = 'leased'

-- part: ending_state
-- The SET of the ending's UPDATE of r that every run needs: its status, when it is claimable
-- again, its output or error, its lease cleared and its last seq (its events and the one that
-- announces the ending).
-- "again": a retry with attempts left, or a release, goes back to pending, unless a cancel was
-- requested: the claim skips such runs, so it would wait forever; cancelled. A retry without
-- attempts left is dead; attempts that ended in a wait (wait_count) are not failures and do not
-- count. A wait with a cancel requested is cancelled too. The SET reads the row as locked (no
-- stale read).
status = CASE
    WHEN f.ending IN ('retry', 'released') AND r.cancel_requested_at IS NULL
         AND (f.ending = 'released' OR r.attempts - r.wait_count < r.max_attempts) THEN 'pending'
    WHEN f.ending IN ('retry', 'released', 'waiting') AND r.cancel_requested_at IS NOT NULL
    THEN 'cancelled'
    WHEN f.ending = 'retry' THEN 'dead'
    ELSE f.ending END,  -- done, dead, cancelled, waiting: the status of the same name
-- again after a retry: backoff min(retry_max_s, retry_base_s x 2^(attempts-1));
-- after a release: at once, for another worker
available_at = CASE
    WHEN f.ending = 'retry' AND r.cancel_requested_at IS NULL AND r.attempts - r.wait_count < r.max_attempts
    THEN now() + make_interval(secs => least(CAST(:retry_max_s AS float8),
                     CAST(:retry_base_s AS float8) * power(2, r.attempts - r.wait_count - 1)))
    WHEN f.ending = 'released' AND r.cancel_requested_at IS NULL THEN now()
    ELSE r.available_at END,
queue_rank = CASE
    WHEN f.ending = 'retry' AND r.cancel_requested_at IS NULL AND r.attempts - r.wait_count < r.max_attempts
    THEN now() + make_interval(secs => least(CAST(:retry_max_s AS float8),
                     CAST(:retry_base_s AS float8) * power(2, r.attempts - r.wait_count - 1)))
         - make_interval(secs => r.priority * CAST(:aging_s AS float8))
    WHEN f.ending = 'released' AND r.cancel_requested_at IS NULL
    THEN now() - make_interval(secs => r.priority * CAST(:aging_s AS float8))
    ELSE r.queue_rank END,
finished_at = CASE
    WHEN f.ending IN ('retry', 'released') AND r.cancel_requested_at IS NULL
         AND (f.ending = 'released' OR r.attempts - r.wait_count < r.max_attempts) THEN NULL
    WHEN f.ending = 'waiting' AND r.cancel_requested_at IS NULL THEN NULL
    ELSE now() END,
output = CASE WHEN f.ending = 'done' THEN f.output ELSE r.output END,
-- a done run shows no error (earlier failures stay in the event log); a cancel keeps the last
-- attempt's
error_code = CASE WHEN f.ending = 'cancelled' THEN r.error_code ELSE f.error_code END,
error_message = CASE WHEN f.ending = 'cancelled' THEN r.error_message ELSE f.error_message END,
lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
last_event_seq = r.last_event_seq + f.n + 1,
updated_at = now()

-- part: ending_fenced
-- The rest of the ending's UPDATE: the fence, and what t returns (freed_by: the worker whose
-- slot the run held, as locked read it; keeps_messages: a thread's messages are kept).
  FROM f, locked
 WHERE r.id = locked.id AND r.id = f.run_id AND r.lease_id = f.lease_id AND r.status = 'leased'
   -- the worker ends a run cancelled only when asked to
   AND (f.ending <> 'cancelled' OR r.cancel_requested_at IS NOT NULL)
-- not the input: decoding it again for every finished run costs more than a no-op run
RETURNING r.id, r.status, r.attempts, r.output, r.available_at, r.updated_at, r.finished_at,
          r.locked_by, r.locked_until, r.error_code, r.error_message, r.cancel_reason,
          r.last_event_seq, r.waitpoint, f.ending, f.n, f.lease_id, r.thread_id, r.history_at,
          locked.locked_by AS freed_by,
          -- threads (§8): an ending writes the messages added since the last checkpoint only
          -- when the agent finished or was stopped (done, cancelled; not rolled back): a retry
          -- resumes from that checkpoint and adds them again, a failed attempt adds none
          f.ending IN ('done', 'cancelled') AS keeps_messages

-- part: ending_written
-- Defines ev, notified, freed and woken from t, and ends the statement with its result: each
-- ended run's events and its outcome event, one NOTIFY per 150 runs, the worker's freed slots,
-- and the idle workers woken for released runs.
ev AS (
    -- only the runs whose lease held (t), so a lost lease drops that run's events alone
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT t.id, t.last_event_seq - t.n - 1 + e.k, e.type, e.data, t.attempts, t.history_at
      FROM t JOIN e ON e.run_id = t.id AND e.lease_id = t.lease_id
    UNION ALL
    ${part:outcome_event}
      FROM t
    RETURNING run_id
), notified AS MATERIALIZED (
    -- One NOTIFY per 150 runs ("<run_id>:<last_seq>" joined by commas, under 8,000 bytes)
    SELECT pg_notify('${events_channel}', string_agg(n.id::text || ':' || n.last_event_seq, ',')) AS sent
      FROM (SELECT id, last_event_seq, (row_number() OVER ()) / 150 AS chunk FROM t) n
     GROUP BY n.chunk
), freed AS (
    -- the worker's registered slots in use drop with the runs it ended, so runq_wake_workers
    -- sees its room at once, not at its next heartbeat (runs ending in one batch share a worker)
    UPDATE workers w SET slots_in_use = greatest(w.slots_in_use - x.n, 0)
      FROM (SELECT t.freed_by, count(*) AS n FROM t GROUP BY t.freed_by) x
     WHERE w.worker_id = x.freed_by
), woken AS MATERIALIZED (
    -- released runs are claimable at once: wake idle workers instead of waiting for their poll
    -- (retries with a backoff are not: their available_at is ahead, the poll finds them)
    SELECT runq_wake_workers((SELECT count(*) FROM t WHERE t.ending = 'released' AND t.status = 'pending')) AS sent
)
SELECT t.id, t.status, t.attempts, t.output, t.available_at, t.updated_at, t.finished_at,
       t.locked_by, t.locked_until, t.error_code, t.error_message, t.cancel_reason, t.last_event_seq
  FROM t
 WHERE (SELECT count(*) FROM notified) + (SELECT count(*) FROM woken) >= 0

-- name: finish_if_leased
-- End many attempts, each fenced by its own lease, each with its events and its outcome event
-- (a batch with no wait, thread message or usage).
WITH ${part:ending_input},
locked AS MATERIALIZED (
    ${part:ending_leased}
     ORDER BY r.id
       FOR UPDATE OF r
),
${part:buffered_events},
t AS (
    UPDATE agent_runs r
       SET ${part:ending_state},
           waitpoint = NULL
    ${part:ending_fenced}
),
${part:ending_written};

-- name: finish_if_leased_with_extras
-- finish_if_leased for a batch with waits, thread messages or usage: also the waitpoints and
-- their checkpoints, the threads' messages, and the runs' and their tenants' usage.
WITH ${part:ending_input},
w AS (
    -- waits (docs/waits.md): the waitpoint each "waiting" ending opens, and the checkpoint
    -- the resumed attempt starts from
    SELECT * FROM unnest(CAST(:wait_run_ids AS uuid[]), CAST(:waitpoint_ids AS uuid[]),
                         CAST(:wait_names AS text[]), CAST(:wait_occurrences AS int[]),
                         CAST(:wait_payloads AS jsonb[]), CAST(:wait_timeouts AS float8[]),
                         CAST(:wait_states AS jsonb[]))
        AS w(run_id, waitpoint_id, name, occurrence, payload, timeout_s, state)
),
${part:thread_messages},
locked AS MATERIALIZED (
    ${part:ending_leased}
       AND (SELECT count(*) FROM thread_locked) >= 0  -- threads first
     ORDER BY r.id
       FOR UPDATE OF r
),
${part:buffered_events},
${part:usage_deltas},
t AS (
    UPDATE agent_runs r
       SET ${part:ending_state},
           -- the open waitpoint, as run JSON and run.waiting show it
           waitpoint = CASE WHEN f.ending = 'waiting' AND r.cancel_requested_at IS NULL THEN
               (SELECT jsonb_build_object('waitpoint_id', w.waitpoint_id, 'name', w.name, 'payload', w.payload,
                                          'expires_at', now() + make_interval(secs => w.timeout_s))
                  FROM w WHERE w.run_id = r.id) END,
           wait_count = r.wait_count + CASE WHEN f.ending = 'waiting' AND r.cancel_requested_at IS NULL
                                            THEN 1 ELSE 0 END,
           usage = ${part:usage_added}  -- the delta added key by key
    ${part:ending_fenced}
),
${part:tenant_usage_hourly},
waited AS (
    -- waits: the waitpoint, per run, name and occurrence; a wait asked again at the same
    -- place (a requeued run that was cancelled while waiting) opens it again
    INSERT INTO waitpoints (waitpoint_id, run_id, name, occurrence, payload, expires_at, attempt)
    SELECT w.waitpoint_id, t.id, w.name, w.occurrence, w.payload,
           now() + make_interval(secs => w.timeout_s), t.attempts
      FROM t JOIN w ON w.run_id = t.id
     WHERE t.status = 'waiting'
    ON CONFLICT (run_id, name, occurrence) DO UPDATE
       SET waitpoint_id = excluded.waitpoint_id, payload = excluded.payload,
           expires_at = excluded.expires_at, attempt = excluded.attempt, created_at = now(),
           resumed_at = NULL, value = NULL, timed_out = false, cancelled_at = NULL
    RETURNING run_id
), wait_checkpoint AS (
    -- waits: the checkpoint with the wait, so the resumed attempt starts where this one stopped
    INSERT INTO run_checkpoints (run_id, state, attempt, event_seq)
    SELECT t.id, w.state, t.attempts, t.last_event_seq
      FROM t JOIN w ON w.run_id = t.id
     WHERE t.status = 'waiting' AND w.state IS NOT NULL
    ON CONFLICT (run_id) DO UPDATE
       SET state = excluded.state, attempt = excluded.attempt, event_seq = excluded.event_seq,
           created_at = now()
    RETURNING run_id
),
${part:thread_messages_added},
${part:ending_written};
