-- A run's event log, its checkpoint and effect ledger, and who is following it.

-- part: appended_input
-- Defines a: one row per run of the batch, with its checkpoint state (or null) and n, how many
-- buffered events it has (counted by the worker, so no statement counts them again).
a AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[]), CAST(:states AS jsonb[]),
                         CAST(:event_counts AS int[]))
        AS a(run_id, lease_id, state, n)
)

-- part: appended_leased
-- The runs of a still leased under their lease, as r (the statement locks them in id order, as
-- the heartbeat and the endings lock them: batched statements of one worker over the same runs
-- never deadlock).
SELECT r.id FROM agent_runs r JOIN a ON a.run_id = r.id
 WHERE r.lease_id = a.lease_id AND r.status = 'leased'

-- part: appended_seq
-- The SET of the append's UPDATE of r that every run needs: its last seq. Seqs come from
-- last_event_seq under the row lock: gapless, in commit order, also next to the API's writes (a
-- cancel request appends its event under the same lock). Not updated_at: it is in an index
-- (ix_agent_runs_waiting), and an update of an indexed column is never HOT, so each flush of a
-- streaming run wrote a new entry into every index of the row; updated_at moves with the run's
-- state changes, its events have their own created_at.
last_event_seq = r.last_event_seq + a.n

-- part: appended_fenced
-- The rest of the append's UPDATE: the fence, and what t returns.
  FROM locked, a
 WHERE r.id = locked.id AND a.run_id = r.id AND r.lease_id = a.lease_id AND r.status = 'leased'
-- (keeps_messages: the worker sends a thread's messages only with a checkpoint or a step's
-- record, so they are always kept)
RETURNING r.id, a.lease_id, r.last_event_seq, r.attempts, a.state, a.n, r.thread_id, r.cancel_reason,
          r.history_at, true AS keeps_messages

-- part: appended_written
-- Defines ev, ck and notified from t: the events, the checkpoints, and one NOTIFY per 150 runs
-- ("<run_id>:<last_seq>" joined by commas, under 8,000 bytes) for the runs with something to
-- read only: a hundred streams reading nothing is not free.
ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT t.id, t.last_event_seq - t.n + e.k, e.type, e.data, t.attempts, t.history_at
      FROM t JOIN e ON e.run_id = t.id AND e.lease_id = t.lease_id
    RETURNING run_id
), ck AS (
    INSERT INTO run_checkpoints (run_id, state, attempt, event_seq)
    SELECT t.id, t.state, t.attempts, t.last_event_seq FROM t
     WHERE t.state IS NOT NULL
    ON CONFLICT (run_id) DO UPDATE
       SET state = excluded.state, attempt = excluded.attempt, event_seq = excluded.event_seq,
           created_at = now()
    RETURNING run_id
), notified AS MATERIALIZED (
    SELECT pg_notify('${events_channel}', string_agg(n.id::text || ':' || n.last_event_seq, ',')) AS sent
      FROM (SELECT id, last_event_seq, (row_number() OVER ()) / 150 AS chunk
              FROM t WHERE t.n > 0) n
     GROUP BY n.chunk
)

-- name: append_events_if_leased
-- Events for many runs of one worker in one statement (one commit per flush, whatever the
-- number of runs), each fenced by its own lease: a run missing from the result lost its lease
-- and nothing was written for it. A non-null state also stores that run's checkpoint with its
-- events, atomically. Followers are woken for the runs that got something to read. For a batch
-- with no thread message and no usage; append_events_if_leased_with_extras for the others.
WITH ${part:appended_input},
${part:buffered_events},
locked AS MATERIALIZED (
    ${part:appended_leased}
     ORDER BY r.id
       FOR UPDATE OF r
), t AS (
    UPDATE agent_runs r
       SET ${part:appended_seq}
    ${part:appended_fenced}
),
${part:appended_written}
SELECT t.id, t.last_event_seq, NULL::jsonb AS kept FROM t
 WHERE (SELECT count(*) FROM notified) >= 0;

-- name: append_events_if_leased_with_extras
-- append_events_if_leased for a batch with thread messages, usage or step records: also the
-- threads' messages, the runs' and their tenants' usage, and the effect ledger's records (a
-- durable step is this one commit: its record, its events, its usage). A record whose key the
-- ledger already holds is not replaced: kept returns the stored one instead, per run.
WITH ${part:appended_input},
${part:buffered_events},
${part:usage_deltas},
${part:thread_messages},
fx AS (
    SELECT * FROM unnest(CAST(:effect_run_ids AS uuid[]), CAST(:effect_lease_ids AS uuid[]),
                         CAST(:effect_keys AS text[]), CAST(:effect_results AS jsonb[]))
        AS fx(run_id, lease_id, key, result)
),
locked AS MATERIALIZED (
    ${part:appended_leased}
       AND (SELECT count(*) FROM thread_locked) >= 0  -- threads first
     ORDER BY r.id
       FOR UPDATE OF r
), t AS (
    UPDATE agent_runs r
       SET ${part:appended_seq},
           usage = ${part:usage_added}  -- the delta added key by key
    ${part:appended_fenced}
),
${part:tenant_usage_hourly},
${part:thread_messages_added},
recorded AS (
    -- under the run's row lock (locked): a record lands only while its lease holds
    INSERT INTO run_effects (run_id, key, result, attempt)
    SELECT t.id, fx.key, fx.result, t.attempts
      FROM t JOIN fx ON fx.run_id = t.id AND fx.lease_id = t.lease_id
    ON CONFLICT (run_id, key) DO NOTHING
    RETURNING run_id, key
), kept AS (
    -- the keys an earlier write recorded first (this statement's snapshot shows them)
    SELECT fx.run_id, jsonb_object_agg(fx.key, s.result) AS records
      FROM t JOIN fx ON fx.run_id = t.id AND fx.lease_id = t.lease_id
      JOIN run_effects s ON s.run_id = fx.run_id AND s.key = fx.key
     WHERE NOT EXISTS (SELECT 1 FROM recorded x WHERE x.run_id = fx.run_id AND x.key = fx.key)
     GROUP BY fx.run_id
),
${part:appended_written}
SELECT t.id, t.last_event_seq, kept.records AS kept
  FROM t LEFT JOIN kept ON kept.run_id = t.id
 WHERE (SELECT count(*) FROM notified) >= 0;

-- name: read_events
-- One run's events after a cursor; seqs commit in order, so none can appear later below it.
-- history_at names the run's one partition: the others are pruned when the statement starts.
SELECT seq, type, data, attempt, created_at FROM run_events
 WHERE run_id = :run_id AND seq > :after
   AND history_at = (SELECT history_at FROM agent_runs WHERE id = :run_id)
 ORDER BY seq
 LIMIT :limit;

-- name: read_event_pages
-- What an API process's streams need after a wake-up, for every (run, cursor) they follow.
-- Each run's next events (data as JSON text, sent as is) and, from the same snapshot, its
-- status and last seq, so a stream knows without another read whether more can come.
-- r.history_at prunes each run's read to its one partition of run_events.
SELECT c.i, r.status, r.last_event_seq, e.seq, e.type, e.data::text AS data
  FROM unnest(CAST(:run_ids AS uuid[]), CAST(:afters AS int[])) WITH ORDINALITY AS c(run_id, after, i)
  JOIN agent_runs r ON r.id = c.run_id
  LEFT JOIN LATERAL (SELECT seq, type, data FROM run_events
                      WHERE run_id = c.run_id AND history_at = r.history_at AND seq > c.after
                      ORDER BY seq
                      LIMIT :limit) e ON true
 ORDER BY c.i, e.seq;

-- name: get_effects
-- The effect ledger of a run: every record that committed, by key (an attempt reads it once).
SELECT key, result FROM run_effects WHERE run_id = :run_id;

-- name: attach_subscriber
-- A stream started following a run (presence for on_disconnect=cancel).
INSERT INTO run_subscribers (run_id, subscriber_id) VALUES (:run_id, :subscriber_id)
ON CONFLICT (run_id, subscriber_id) DO UPDATE SET seen_at = now();

-- name: touch_subscribers
-- The streams of one process are still there.
UPDATE run_subscribers SET seen_at = now()
 WHERE subscriber_id = ANY(CAST(:subscriber_ids AS uuid[]));

-- name: detach_subscribers
-- Streams closed: forget them, and start their runs' grace window now.
WITH gone AS (
    DELETE FROM run_subscribers s
     USING unnest(CAST(:run_ids AS uuid[]), CAST(:subscriber_ids AS uuid[])) AS d(run_id, subscriber_id)
     WHERE s.run_id = d.run_id AND s.subscriber_id = d.subscriber_id
    RETURNING s.run_id
)
UPDATE agent_runs SET detached_at = now() WHERE id IN (SELECT run_id FROM gone);
