-- The reaper's passes: expired leases, abandoned interactive runs, retention. Each runs under
-- reaper_lock (one reaper at a time cluster-wide, per pass) and locks the rows it changes.

-- name: reaper_lock
-- One reaper per pass: transaction-scoped, so a stalled process never stops reaping.
SELECT pg_try_advisory_xact_lock(hashtext('runq.reaper'));

-- name: pick_expired
-- Leases past their locked_until, oldest first, locked for reap_expired in the same transaction.
SELECT id FROM agent_runs
 WHERE status = 'leased' AND locked_until < now()
 ORDER BY locked_until
 LIMIT :batch
   FOR UPDATE SKIP LOCKED;

-- name: reap_expired
-- Expired leases (of pick_expired) back to pending, or dead (lease_expired) once attempts are
-- used up, or cancelled when a cancel was requested; each with its outcome event; idle workers
-- woken for the runs back to pending. Attempts that ended in a wait (wait_count) do not count
-- toward max_attempts. Guarded by the state it expects: a run that changed meanwhile is left.
WITH t AS (
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
     WHERE id = ANY(CAST(:run_ids AS uuid[])) AND status = 'leased' AND locked_until < now()
    RETURNING agent_runs.*
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    ${part:outcome_event}
      FROM t
    RETURNING run_id
), woken AS MATERIALIZED (
    -- the runs back to pending wake as many idle workers as they need
    SELECT runq_wake_workers((SELECT count(*) FROM t WHERE t.status = 'pending')) AS sent
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq)
  FROM t
 WHERE (SELECT count(*) FROM woken) >= 0;

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
-- Retention: one batch of finished runs older than the age whose events partition is gone
-- (history_at < :before, the oldest day partition still there; see app/queue/partitions.py), so
-- the trigger that deletes a run's events finds nothing left to delete row by row. Oldest first by creation;
-- a run created that early but still going or re-homed is rare, so the scan skips few. The
-- LangGraph checkpoints of a run outside a thread (their thread id is the run's) go with it; a
-- thread's graph stays with its thread.
WITH old AS MATERIALIZED (
    SELECT id FROM agent_runs
     WHERE created_at < :before AND history_at < :before
       AND status IN ('done', 'dead', 'cancelled')
       AND finished_at < now() - make_interval(secs => :older_than_s)
     ORDER BY created_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), graph_writes AS (
    DELETE FROM langgraph_checkpoint_writes WHERE thread_id IN (SELECT CAST(id AS text) FROM old)
), graph_checkpoints AS (
    DELETE FROM langgraph_checkpoints WHERE thread_id IN (SELECT CAST(id AS text) FROM old)
)
DELETE FROM agent_runs WHERE id IN (SELECT id FROM old);

-- name: count_purgeable
-- How many finished runs purge_finished would delete at this age (runq purge --dry-run).
SELECT count(*) FROM agent_runs
 WHERE created_at < :before AND history_at < :before
   AND status IN ('done', 'dead', 'cancelled')
   AND finished_at < now() - make_interval(secs => :older_than_s);

-- name: list_event_partitions
-- The partitions of run_events with their bounds (lo null: MINVALUE), oldest first; expired:
-- the partition's day ended more than the age plus a day ago (a run's events may go on
-- arriving for a day before the reaper re-homes it, so later than that none are in flight).
SELECT p.name, p.is_default, p.lo, p.hi,
       coalesce(p.hi <= now() - make_interval(secs => CAST(:older_than_s AS float8) + :grace_s), false) AS expired
  FROM (SELECT c.relname AS name, b.bound = 'DEFAULT' AS is_default,
               CAST((regexp_match(b.bound, 'FROM \(''([^'']+)''\)'))[1] AS timestamptz) AS lo,
               CAST((regexp_match(b.bound, 'TO \(''([^'']+)''\)'))[1] AS timestamptz) AS hi
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
         WHERE i.inhparent = CAST('run_events' AS regclass)) p
 ORDER BY p.is_default, p.lo NULLS FIRST;

-- name: partition_lock_timeout
-- Partition DDL locks run_events for a moment: it gives up rather than queue every statement
-- behind a long one; the next pass retries.
SET LOCAL lock_timeout = '200ms';

-- name: create_event_partition_table
-- A day's partition, made outside run_events first (DDL template: {partition} is filled in).
CREATE TABLE {partition} (LIKE run_events INCLUDING DEFAULTS);

-- name: move_default_events
-- Events that went to the default partition for lack of their day's partition (the reaper was
-- down): moved into it before it is attached, in the same transaction.
WITH moved AS (
    DELETE FROM run_events_default
     WHERE history_at >= :lo AND history_at < :hi
    RETURNING run_id, seq, type, data, attempt, created_at, history_at
)
INSERT INTO {partition} (run_id, seq, type, data, attempt, created_at, history_at)
SELECT run_id, seq, type, data, attempt, created_at, history_at FROM moved;

-- name: attach_event_partition
-- The new partition joins run_events (its primary key is cloned onto it).
ALTER TABLE run_events ATTACH PARTITION {partition} FOR VALUES FROM ({lo}) TO ({hi});

-- name: rehome_unfinished_runs
-- Runs still going a day after their history_at move their history to today's partition (the
-- agent_runs_events_rehomed trigger moves their events in the same statement), so an expired
-- partition never holds a run that can still write. A batch of each kind, oldest first: the
-- queued runs (pending, waiting) through ix_agent_runs_unfinished, which leaves leased runs out,
-- and the leased ones, few, through ix_agent_runs_leased.
WITH queued AS (
    SELECT id FROM agent_runs
     WHERE status NOT IN ('done', 'dead', 'cancelled', 'leased')
       AND history_at < now() - make_interval(secs => :grace_s)
     ORDER BY history_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), leased AS (
    SELECT id FROM agent_runs
     WHERE status = 'leased'
       AND history_at < now() - make_interval(secs => :grace_s)
     ORDER BY history_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
)
-- by id = ANY(ARRAY(...)): a lookup of the primary key per run, never a join by a scan
UPDATE agent_runs r SET history_at = now()
 WHERE r.id = ANY(ARRAY(SELECT id FROM queued UNION ALL SELECT id FROM leased));

-- name: partition_has_unfinished_runs
-- Whether a run still going has its events in [lo, hi): such a partition is not dropped yet.
-- The leased ones are looked for apart, through ix_agent_runs_leased (ix_agent_runs_unfinished
-- leaves them out).
SELECT EXISTS (SELECT 1 FROM agent_runs
                WHERE status NOT IN ('done', 'dead', 'cancelled', 'leased')
                  AND history_at >= coalesce(CAST(:lo AS timestamptz), '-infinity') AND history_at < :hi)
    OR EXISTS (SELECT 1 FROM agent_runs
                WHERE status = 'leased'
                  AND history_at >= coalesce(CAST(:lo AS timestamptz), '-infinity') AND history_at < :hi);

-- name: drop_event_partition
-- Retention by partition: a day's events, all at once (DDL template: {partition} is filled in).
DROP TABLE {partition};

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
