-- Waits (docs/waits.md): a waiting run holds no lease; these statements read its waitpoints and
-- resume it. The wait itself is an ending of finish_if_leased.

-- name: find_waitpoint
-- The recorded wait at (run, name, occurrence), if one was resumed (by a value or a time-out).
SELECT value, timed_out FROM waitpoints
 WHERE run_id = :run_id AND name = :name AND occurrence = :occurrence AND resumed_at IS NOT NULL;

-- name: resume_waits
-- Waiting runs back to pending (claimable at once) with run.resumed, each waitpoint recording
-- its value or its time-out; idle workers woken. Fenced by the status and the open waitpoint
-- under the row lock: of concurrent resumes of one wait exactly one finds it still open.
WITH g AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:waitpoint_ids AS uuid[]),
                         CAST(:wait_values AS jsonb[]), CAST(:timed_out AS boolean[]))
        AS g(run_id, waitpoint_id, value, timed_out)
), picked AS MATERIALIZED (
    -- rows locked in id order; a null waitpoint_id means "the open one, whichever it is"
    SELECT r.id, CAST(r.waitpoint ->> 'waitpoint_id' AS uuid) AS waitpoint_id, g.value, g.timed_out,
           extract(epoch FROM now() - r.updated_at) AS waited_s  -- updated_at: when it began waiting
      FROM agent_runs r JOIN g ON g.run_id = r.id
     WHERE r.status = 'waiting'
       AND (CAST(:tenant_id AS text) IS NULL OR r.tenant_id = :tenant_id)
       AND (g.waitpoint_id IS NULL OR r.waitpoint ->> 'waitpoint_id' = CAST(g.waitpoint_id AS text))
     ORDER BY r.id
       FOR UPDATE OF r
), t AS (
    UPDATE agent_runs r
       SET status = 'pending', available_at = now(),
           queue_rank = now() - make_interval(secs => r.priority * CAST(:aging_s AS float8)),
           waitpoint = NULL, last_event_seq = r.last_event_seq + 1, updated_at = now()
      FROM picked p
     WHERE r.id = p.id AND r.status = 'waiting'
    RETURNING r.*, p.waitpoint_id AS resumed_waitpoint_id, p.value AS resumed_value, p.timed_out AS resumed_timed_out,
              p.waited_s
), recorded AS (
    UPDATE waitpoints w
       SET resumed_at = now(), value = t.resumed_value, timed_out = t.resumed_timed_out
      FROM t
     WHERE w.waitpoint_id = t.resumed_waitpoint_id
    RETURNING w.run_id
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT t.id, t.last_event_seq, 'run.resumed',
           CASE WHEN t.resumed_timed_out
                THEN jsonb_build_object('waitpoint_id', t.resumed_waitpoint_id, 'timed_out', true)
                ELSE jsonb_build_object('waitpoint_id', t.resumed_waitpoint_id, 'value', t.resumed_value) END,
           t.attempts, t.history_at
      FROM t
    RETURNING run_id
), woken AS MATERIALIZED (
    -- the resumed runs wake as many idle workers as they need (runq_wake_workers, migration 0012)
    SELECT runq_wake_workers((SELECT count(*) FROM t)) AS sent
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq)
  FROM t
 WHERE (SELECT count(*) FROM woken) >= 0;

-- name: due_waitpoints
-- Open waits past their expires_at (the reaper resumes them as timed out), oldest first.
SELECT w.run_id, w.waitpoint_id FROM waitpoints w
 WHERE w.resumed_at IS NULL AND w.cancelled_at IS NULL AND w.expires_at IS NOT NULL AND w.expires_at < now()
 ORDER BY w.expires_at
 LIMIT :batch;
