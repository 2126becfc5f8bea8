-- How an attempt ends. Every statement is fenced: it changes the run only while it is leased
-- under the claim's own lease_id, and no row back means the lease is lost (write nothing more).
-- Each appends the run's buffered events and then the event that announces the new status.

-- name: complete_if_leased
-- done with run.completed {output}; a done run shows no error (earlier failures stay in the log).
WITH t AS (
    UPDATE agent_runs
       SET status = 'done', output = CAST(:output AS jsonb), finished_at = now(),
           error_code = NULL, error_message = NULL,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])) + 1,
           updated_at = now()
     WHERE id = :run_id AND lease_id = :lease_id AND status = 'leased'
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - 1 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq, 'run.completed', jsonb_build_object('output', t.output), t.attempts
      FROM t
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq) FROM t;

-- name: complete_many_if_leased
-- complete_if_leased for many runs of one worker, each fenced by its own lease.
WITH done AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[]), CAST(:outputs AS jsonb[]))
        AS d(run_id, lease_id, output)
), e AS (
    -- every run's buffered events; k numbers one run's events from 1, n counts them
    SELECT x.run_id, x.type, x.data,
           row_number() OVER (PARTITION BY x.run_id ORDER BY x.ord) AS k,
           count(*) OVER (PARTITION BY x.run_id) AS n
      FROM unnest(CAST(:event_run_ids AS uuid[]), CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS x(run_id, type, data, ord)
), t AS (
    UPDATE agent_runs r
       SET status = 'done', output = d.output, finished_at = now(),
           error_code = NULL, error_message = NULL,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           last_event_seq = r.last_event_seq + coalesce((SELECT max(e.n) FROM e WHERE e.run_id = r.id), 0) + 1,
           updated_at = now()
      FROM done d
     WHERE r.id = d.run_id AND r.lease_id = d.lease_id AND r.status = 'leased'
    RETURNING r.id, r.attempts, r.output, r.last_event_seq
), ev AS (
    -- only the runs whose lease held (t), so a lost lease drops that run's events alone
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - e.n - 1 + e.k, e.type, e.data, t.attempts
      FROM t JOIN e ON e.run_id = t.id
    UNION ALL
    SELECT t.id, t.last_event_seq, 'run.completed', jsonb_build_object('output', t.output), t.attempts
      FROM t
    RETURNING run_id
), notified AS MATERIALIZED (
    SELECT pg_notify('${events_channel}', string_agg(n.id::text || ':' || n.last_event_seq, ',')) AS sent
      FROM (SELECT id, last_event_seq, (row_number() OVER ()) / 150 AS chunk FROM t) n
     GROUP BY n.chunk
)
SELECT t.id, t.last_event_seq FROM t WHERE (SELECT count(*) FROM notified) >= 0;

-- name: retry_or_bury
-- A retryable failure: pending after backoff (run.retrying), dead once attempts are used up
-- (run.failed), cancelled if a cancel was requested (the claim skips such runs: never pending).
WITH t AS (
    UPDATE agent_runs
       SET status = CASE WHEN cancel_requested_at IS NULL AND attempts < max_attempts THEN 'pending'
                         WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                         ELSE 'dead' END,
           -- backoff: min(retry_max_s, retry_base_s x 2^(attempts-1))
           available_at = CASE WHEN cancel_requested_at IS NULL AND attempts < max_attempts
                               THEN now() + make_interval(secs => least(CAST(:retry_max_s AS float8),
                                        CAST(:retry_base_s AS float8) * power(2, attempts - 1)))
                               ELSE available_at END,
           queue_rank = CASE WHEN cancel_requested_at IS NULL AND attempts < max_attempts
                             THEN now() + make_interval(secs => least(CAST(:retry_max_s AS float8),
                                      CAST(:retry_base_s AS float8) * power(2, attempts - 1)))
                                  - make_interval(secs => priority * CAST(:aging_s AS float8))
                             ELSE queue_rank END,
           finished_at = CASE WHEN cancel_requested_at IS NULL AND attempts < max_attempts
                              THEN NULL ELSE now() END,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           error_code = :error_code, error_message = :error_message,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])) + 1,
           updated_at = now()
     WHERE id = :run_id AND lease_id = :lease_id AND status = 'leased'
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - 1 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq,
           CASE t.status WHEN 'pending' THEN 'run.retrying'
                         WHEN 'cancelled' THEN 'run.cancelled'
                         ELSE 'run.failed' END,
           CASE t.status
                WHEN 'pending' THEN jsonb_build_object('attempt', t.attempts, 'error_code', t.error_code,
                                                       'available_at', t.available_at)
                WHEN 'cancelled' THEN jsonb_build_object('reason', t.cancel_reason)
                ELSE jsonb_build_object('error_code', t.error_code, 'error_message', t.error_message) END,
           t.attempts
      FROM t
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq) FROM t;

-- name: bury_if_leased
-- A fatal failure: dead at once with run.failed {error_code, error_message}.
WITH t AS (
    UPDATE agent_runs
       SET status = 'dead', finished_at = now(), error_code = :error_code, error_message = :error_message,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])) + 1,
           updated_at = now()
     WHERE id = :run_id AND lease_id = :lease_id AND status = 'leased'
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - 1 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq, 'run.failed',
           jsonb_build_object('error_code', t.error_code, 'error_message', t.error_message), t.attempts
      FROM t
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq) FROM t;

-- name: finalize_cancel
-- The worker honours a cancel request: cancelled with run.cancelled {reason}.
WITH t AS (
    UPDATE agent_runs
       SET status = 'cancelled', finished_at = now(),
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])) + 1,
           updated_at = now()
     WHERE id = :run_id AND lease_id = :lease_id AND status = 'leased'
       AND cancel_requested_at IS NOT NULL
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - 1 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq, 'run.cancelled', jsonb_build_object('reason', t.cancel_reason), t.attempts
      FROM t
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq) FROM t;

-- name: release_if_leased
-- Graceful shutdown: pending at once (run.retrying, worker_shutdown) for another worker, whom
-- the runs channel wakes; cancelled instead if a cancel was requested.
WITH t AS (
    UPDATE agent_runs
       SET status = CASE WHEN cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
           available_at = CASE WHEN cancel_requested_at IS NULL THEN now() ELSE available_at END,
           queue_rank = CASE WHEN cancel_requested_at IS NULL
                             THEN now() - make_interval(secs => priority * CAST(:aging_s AS float8))
                             ELSE queue_rank END,
           finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE now() END,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           error_code = 'worker_shutdown', error_message = NULL,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])) + 1,
           updated_at = now()
     WHERE id = :run_id AND lease_id = :lease_id AND status = 'leased'
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
    SELECT t.id, t.last_event_seq - 1 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq,
           CASE t.status WHEN 'pending' THEN 'run.retrying' ELSE 'run.cancelled' END,
           CASE t.status
                WHEN 'pending' THEN jsonb_build_object('attempt', t.attempts, 'error_code', t.error_code,
                                                       'available_at', t.available_at)
                ELSE jsonb_build_object('reason', t.cancel_reason) END,
           t.attempts
      FROM t
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq),
       pg_notify('${runs_channel}', '')
  FROM t;
