-- The reaper's passes: expired leases, abandoned interactive runs, retention. Each runs under
-- reaper_lock (one reaper at a time cluster-wide, per pass) and locks the rows it changes.

-- name: reaper_lock
-- One reaper per pass: transaction-scoped, so a stalled process never stops reaping.
SELECT pg_try_advisory_xact_lock(hashtext('runq.reaper'));

-- name: reap_expired
-- Expired leases back to pending, or dead (lease_expired) once attempts are used up, or
-- cancelled when a cancel was requested; each with its outcome event; idle workers woken.
-- Attempts that ended in a wait (wait_count) do not count toward max_attempts.
WITH expired AS (
    SELECT id AS expired_id FROM agent_runs
     WHERE status = 'leased' AND locked_until < now()
     ORDER BY locked_until
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), t AS (
    UPDATE agent_runs
       SET status = CASE WHEN cancel_requested_at IS NULL AND attempts - wait_count < max_attempts THEN 'pending'
                         WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                         ELSE 'dead' END,
           available_at = CASE WHEN cancel_requested_at IS NULL AND attempts - wait_count < max_attempts
                               THEN now() ELSE available_at END,
           queue_rank = CASE WHEN cancel_requested_at IS NULL AND attempts - wait_count < max_attempts
                             THEN now() - make_interval(secs => priority * CAST(:aging_s AS float8))
                             ELSE queue_rank END,
           finished_at = CASE WHEN cancel_requested_at IS NULL AND attempts - wait_count < max_attempts
                              THEN NULL ELSE now() END,
           lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL,
           error_code = CASE WHEN cancel_requested_at IS NULL THEN 'lease_expired' ELSE error_code END,
           error_message = CASE WHEN cancel_requested_at IS NULL
                                THEN 'the lease expired before the run finished'
                                ELSE error_message END,
           last_event_seq = last_event_seq + 1,
           updated_at = now()
      FROM expired
     WHERE id = expired.expired_id
    RETURNING agent_runs.*
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt)
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
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq),
       pg_notify('${runs_channel}', '')
  FROM t;

-- name: forget_stale_subscribers
-- Subscribers of processes that died without detaching; their runs' grace window starts at last sight.
WITH stale AS (
    DELETE FROM run_subscribers
     WHERE seen_at < now() - make_interval(secs => CAST(:presence_ttl_s AS float8) * 4)
    RETURNING run_id, seen_at
)
UPDATE agent_runs r SET detached_at = greatest(r.detached_at, s.last_seen)
  FROM (SELECT run_id, max(seen_at) AS last_seen FROM stale GROUP BY run_id) s
 WHERE r.id = s.run_id;

-- name: pick_abandoned
-- Interactive runs nobody has watched for their grace window, locked for request_cancel.
SELECT r.id FROM agent_runs r
 WHERE r.on_disconnect = 'cancel' AND r.status IN ('pending', 'leased', 'waiting') AND r.cancel_requested_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM run_subscribers s
                    WHERE s.run_id = r.id
                      AND s.seen_at > now() - make_interval(secs => :presence_ttl_s))
   -- the grace window counts from creation or from the last subscriber leaving
   AND greatest(r.created_at, r.detached_at,
                (SELECT max(s.seen_at) FROM run_subscribers s WHERE s.run_id = r.id))
       + make_interval(secs => r.disconnect_grace_s) < now()
 LIMIT :batch
   FOR UPDATE SKIP LOCKED;

-- name: purge_finished
-- Retention: one batch of finished runs older than the age (their events go by cascade).
WITH old AS (
    SELECT id FROM agent_runs
     WHERE status IN ('done', 'dead', 'cancelled')
       AND finished_at < now() - make_interval(secs => :older_than_s)
     ORDER BY finished_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
)
DELETE FROM agent_runs WHERE id IN (SELECT id FROM old);

-- name: count_purgeable
-- How many finished runs purge_finished would delete at this age (runq purge --dry-run).
SELECT count(*) FROM agent_runs
 WHERE status IN ('done', 'dead', 'cancelled')
   AND finished_at < now() - make_interval(secs => :older_than_s);

-- name: forget_stale_workers
-- Worker rows whose process stopped beating for a lease (killed, frozen); a live one comes back.
DELETE FROM workers WHERE last_beat_at < now() - make_interval(secs => :lease_s);

-- name: sample_queue
-- Once a minute cluster-wide (under reaper_lock): the queue's depth and the runs that finished
-- in the minute before, for the operators' charts. A pass that finds this minute sampled counts
-- nothing. Samples older than a day and usage hours older than two days go with it.
WITH due AS (
    SELECT date_trunc('minute', now()) AS at
     WHERE NOT EXISTS (SELECT 1 FROM queue_samples WHERE at = date_trunc('minute', now()))
), sample AS (
    INSERT INTO queue_samples (at, pending, leased, finished)
    SELECT due.at,
           (SELECT count(*) FROM agent_runs WHERE status = 'pending'),
           (SELECT count(*) FROM agent_runs WHERE status = 'leased'),
           (SELECT count(*) FROM agent_runs
             WHERE status IN ('done', 'dead', 'cancelled')
               AND finished_at >= due.at - interval '1 minute' AND finished_at < due.at)
      FROM due
    ON CONFLICT (at) DO NOTHING
    RETURNING at
), old_samples AS (
    DELETE FROM queue_samples
     WHERE at < now() - interval '1 day' AND EXISTS (SELECT 1 FROM sample)
), old_hours AS (
    DELETE FROM tenant_usage_hourly
     WHERE hour < now() - interval '2 days' AND EXISTS (SELECT 1 FROM sample)
)
SELECT count(*) AS sampled FROM sample;
