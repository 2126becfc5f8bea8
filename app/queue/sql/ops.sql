-- Operators' statements: requeue, the admin views, the metrics, tenant caps.

-- name: requeue
-- Admin: a dead or cancelled run back to pending at attempt 0 with run.queued, history kept.
WITH t AS (
    UPDATE agent_runs
       SET status = 'pending', attempts = 0, wait_count = 0, waitpoint = NULL, available_at = now(),
           queue_rank = now() - make_interval(secs => priority * CAST(:aging_s AS float8)),
           finished_at = NULL, output = NULL, cancel_requested_at = NULL, cancel_reason = NULL,
           error_code = NULL, error_message = NULL, detached_at = NULL,
           -- a finished run going again moves its history to today's partition (its events
           -- follow by the agent_runs_events_rehomed trigger), so that no partition still to
           -- be dropped holds a run that runs (app/queue/partitions.py)
           history_at = now(),
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[])),
           updated_at = now()
     WHERE id = :run_id AND status IN ('dead', 'cancelled')
    RETURNING *
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT t.id, t.last_event_seq - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts, t.history_at
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq),
       runq_wake_workers(1)
  FROM t;

-- name: count_by_status
-- Runs per status (admin stats).
SELECT status, count(*) AS n FROM agent_runs GROUP BY status;

-- name: inflight_by_tenant
-- Leased runs per tenant (admin stats).
SELECT tenant_id, count(*) AS n FROM agent_runs
 WHERE status = 'leased'
 GROUP BY tenant_id
 ORDER BY tenant_id;

-- name: oldest_pending_age
-- Seconds the oldest runnable pending run has waited.
SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0) FROM agent_runs
 WHERE status = 'pending' AND available_at <= now();

-- name: dead_since
-- Runs that went dead within the window.
SELECT count(*) FROM agent_runs
 WHERE status = 'dead' AND finished_at > now() - make_interval(secs => CAST(:window_s AS float8));

-- name: queue_depth
-- Every /metrics scrape: the live part of the queue only, through the partial indexes, so a
-- scrape costs the same with millions of finished runs as with none.
SELECT (SELECT count(*) FROM agent_runs WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM agent_runs WHERE status = 'leased') AS leased,
       (SELECT count(*) FROM agent_runs WHERE status = 'waiting') AS waiting,
       (SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0) FROM agent_runs
         WHERE status = 'pending' AND available_at <= now()) AS oldest_pending_age_s,
       -- threads (§8): due runs held back by an earlier run of their thread
       (SELECT count(*) FROM agent_runs r
         WHERE r.status = 'pending' AND r.thread_id IS NOT NULL AND r.available_at <= now()
           AND EXISTS (SELECT 1 FROM agent_runs p
                        WHERE p.thread_id = r.thread_id AND p.thread_id IS NOT NULL
                          AND p.thread_turn < r.thread_turn
                          AND p.status NOT IN ('done', 'dead', 'cancelled'))) AS waiting_for_turn;

-- name: live_leases
-- Leased runs by worker, with lease age and last heartbeat (admin workers view).
SELECT locked_by, id, tenant_id, attempts, extract(epoch FROM now() - leased_at) AS lease_age_s,
       heartbeat_at, locked_until
  FROM agent_runs
 WHERE status = 'leased'
 ORDER BY locked_by, leased_at;

-- name: set_tenant_limit
-- One tenant's own in-flight cap (0 = no cap).
INSERT INTO tenant_limits (tenant_id, max_inflight) VALUES (:tenant_id, :max_inflight)
ON CONFLICT (tenant_id) DO UPDATE SET max_inflight = excluded.max_inflight, updated_at = now();

-- name: get_tenant_limit
-- One tenant's own in-flight cap, if set.
SELECT max_inflight FROM tenant_limits WHERE tenant_id = :tenant_id;

-- name: usage_by_tenant
-- Usage per tenant over the current hour and the 23 before it (admin stats), from the hourly
-- rollup the worker's fenced statements keep: at most 24 rows a tenant, whatever the number of runs.
SELECT tenant_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(model_calls) AS model_calls, sum(tool_calls) AS tool_calls
  FROM tenant_usage_hourly
 WHERE hour > now() - interval '24 hours'
 GROUP BY tenant_id
 ORDER BY tenant_id;

-- name: recent_queue_samples
-- The reaper's samples of the last hour, oldest first (admin stats' charts).
SELECT at, pending, leased, finished FROM queue_samples
 WHERE at > now() - interval '1 hour'
 ORDER BY at;
