-- The worker's claims and the heartbeat that keeps them.

-- part: thread_turn_is_next
-- A condition on the run r: no earlier run of its thread is still in flight (threads, §8: one
-- run of a thread at a time, in creation order; ix_agent_runs_thread_inflight).
NOT EXISTS (SELECT 1 FROM agent_runs p
             WHERE p.thread_id = r.thread_id AND p.thread_id IS NOT NULL
               AND p.thread_turn < r.thread_turn
               AND p.status NOT IN ('done', 'dead', 'cancelled'))

-- part: lease_picked
-- Defines claimed, started, registered and notified: the runs of picked leased (lease_id is new
-- for every claim ever made of a run, so it fences a requeued run too), each with its
-- run.started; the worker's slots in use as of this claim (:limit were free), so that
-- runq_wake_workers picks workers that have room; one NOTIFY per 150 runs
-- ("<run_id>:<last_seq>" joined by commas, under 8,000 bytes), not one per run: each costs the
-- committing backend and every listening session. The statement must read notified. Runs are
-- taken by id = ANY(ARRAY(...)), each a lookup of the primary key in any plan: a worker's
-- claims run on a generic plan (app/db/engine.py, worker_engines), which estimates picked at a
-- tenth of the pending runs and would join them by a scan of agent_runs.
claimed AS (
    UPDATE agent_runs r
       SET status = 'leased', attempts = r.attempts + 1, lease_id = gen_random_uuid(),
           locked_by = :worker_id, locked_until = now() + make_interval(secs => :lease_s),
           leased_at = now(), heartbeat_at = now(), last_event_seq = r.last_event_seq + 1,
           updated_at = now()
     WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING r.*
), started AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT id, last_event_seq, 'run.started', jsonb_build_object('attempt', attempts), attempts, history_at
      FROM claimed
    RETURNING run_id
), registered AS (
    -- a data-modifying CTE runs whether or not it is read
    UPDATE workers SET slots_in_use = greatest(slots - CAST(:limit AS int), 0) + (SELECT count(*) FROM claimed)
     WHERE worker_id = :worker_id
), notified AS MATERIALIZED (
    SELECT pg_notify('${events_channel}', string_agg(n.id::text || ':' || n.last_event_seq, ',')) AS sent
      FROM (SELECT id, last_event_seq, (row_number() OVER ()) / 150 AS chunk FROM claimed) n
     GROUP BY n.chunk
)

-- name: claim_batch
-- Lease up to :limit runnable runs (SKIP LOCKED), each with a new lease_id and its run.started.
WITH picked AS (
    SELECT r.id FROM agent_runs r
     WHERE r.status = 'pending' AND r.available_at <= now() AND r.cancel_requested_at IS NULL
       AND ${part:thread_turn_is_next}
     ORDER BY r.queue_rank, r.created_at
     LIMIT :limit
       FOR UPDATE OF r SKIP LOCKED
),
${part:lease_picked},
room AS (
    -- free slots other workers have registered: runq_wake_workers woke them for the runs left
    SELECT coalesce(sum(slots - slots_in_use), 0) AS free FROM workers WHERE worker_id <> :worker_id
)
-- notified is referenced here, so that its NOTIFY is evaluated. One row even when nothing was
-- claimed (its run columns null), for the outlook: more, unclaimed and lost.
SELECT c.*, ck.state AS resume_state, o.more, o.unclaimed, o.lost
  FROM (SELECT
       -- more runnable runs left than those free slots: a slot of ours that frees claims again.
       p.runnable > (SELECT free FROM room) + (SELECT count(*) FROM claimed) AS more,
       -- runnable runs left besides ours, no more than the free slots woken for them: should
       -- one of those wake-ups go astray, a freed slot of ours looks within a poll (runner.py).
       p.runnable > (SELECT count(*) FROM claimed) AS unclaimed,
       -- fewer than :limit claimed, yet this snapshot shows more runnable runs than that (the
       -- claimed ones among them): a concurrent claim held the others. It may have been woken
       -- for a run committed after this snapshot began, which nobody else is woken for: look
       -- again at once.
       CASE WHEN (SELECT count(*) FROM claimed) < CAST(:limit AS int) THEN
           (SELECT count(*) FROM (SELECT 1 FROM agent_runs r
                                   WHERE r.status = 'pending' AND r.available_at <= now()
                                     AND r.cancel_requested_at IS NULL AND ${part:thread_turn_is_next}
                                   ORDER BY r.queue_rank, r.created_at
                                   LIMIT (SELECT count(*) FROM claimed) + 1) h)
               > (SELECT count(*) FROM claimed)
       ELSE false END AS lost
       -- The statement's snapshot still shows the claimed runs pending, so no anti-join: the
       -- probe counts that many more, on the claim's own index (never a scan of the history).
       FROM (SELECT count(*) AS runnable
               FROM (SELECT 1 FROM agent_runs p
                      WHERE p.status = 'pending' AND p.available_at <= now()
                        AND p.cancel_requested_at IS NULL
                      ORDER BY p.queue_rank, p.created_at
                      LIMIT (SELECT free FROM room) + (SELECT count(*) FROM claimed) + 1) l) p) o
  LEFT JOIN claimed c ON true
  LEFT JOIN run_checkpoints ck ON ck.run_id = c.id
 WHERE (SELECT count(*) FROM notified) >= 0;

-- name: claim_batch_capped
-- claim_batch with in-flight caps: skip tenants at their cap, take no more of one than its room.
WITH inflight AS (
    SELECT l.tenant_id, count(*) AS n FROM agent_runs l
     WHERE l.status = 'leased'
     GROUP BY l.tenant_id
), caps AS (
    SELECT i.tenant_id, i.n, coalesce(tl.max_inflight, :default_cap) AS cap
      FROM inflight i LEFT JOIN tenant_limits tl ON tl.tenant_id = i.tenant_id
), candidates AS (
    -- a window of the queue's head without the tenants already at their cap
    SELECT r.id, r.tenant_id, r.queue_rank, r.created_at FROM agent_runs r
     WHERE r.status = 'pending' AND r.available_at <= now() AND r.cancel_requested_at IS NULL
       AND ${part:thread_turn_is_next}
       AND NOT EXISTS (SELECT 1 FROM caps
                        WHERE caps.tenant_id = r.tenant_id AND caps.cap > 0 AND caps.n >= caps.cap)
     ORDER BY r.queue_rank, r.created_at
     LIMIT :scan
), ranked AS (
    -- k numbers each tenant's candidates, so that n + k says whether one still fits
    SELECT c.id, c.queue_rank, c.created_at, coalesce(caps.n, 0) AS n,
           coalesce(caps.cap, tl.max_inflight, :default_cap) AS cap,
           row_number() OVER (PARTITION BY c.tenant_id ORDER BY c.queue_rank, c.created_at) AS k
      FROM candidates c
      LEFT JOIN caps ON caps.tenant_id = c.tenant_id
      LEFT JOIN tenant_limits tl ON tl.tenant_id = c.tenant_id
), picked AS (
    SELECT r.id FROM agent_runs r JOIN ranked ON ranked.id = r.id
     WHERE r.status = 'pending' AND (ranked.cap = 0 OR ranked.n + ranked.k <= ranked.cap)
     ORDER BY ranked.queue_rank, ranked.created_at
     LIMIT :limit
       FOR UPDATE OF r SKIP LOCKED
),
${part:lease_picked}
SELECT c.*, ck.state AS resume_state,
       true AS more  -- with caps, whether a freed slot would find a run is not worth telling
  FROM claimed c LEFT JOIN run_checkpoints ck ON ck.run_id = c.id
 WHERE (SELECT count(*) FROM notified) >= 0;

-- name: claim_lock
-- Capped claims one at a time, so the in-flight counts they read are exact.
SELECT pg_advisory_xact_lock(hashtext('runq.claim'));

-- name: has_tenant_limits
-- Whether any tenant has its own in-flight cap (looked at every few seconds, not per claim).
SELECT EXISTS (SELECT 1 FROM tenant_limits WHERE max_inflight > 0);

-- name: renew_leases
-- The heartbeat: extend every lease still held and register the worker, in one statement;
-- which leases were lost, which cancelled, and how many registered workers have a free slot
-- (one row with a null run_id when no lease is held).
WITH held AS (
    SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[])) AS h(run_id, lease_id)
), locked AS MATERIALIZED (
    -- rows locked in id order, as the worker's batched event writes and endings lock them
    SELECT r.id FROM agent_runs r JOIN held ON held.run_id = r.id
     WHERE r.lease_id = held.lease_id AND r.status = 'leased'
     ORDER BY r.id
       FOR UPDATE OF r
), renewed AS (
    UPDATE agent_runs r
       SET locked_until = now() + make_interval(secs => :lease_s), heartbeat_at = now()
      FROM held, locked
     WHERE r.id = locked.id AND r.id = held.run_id AND r.lease_id = held.lease_id AND r.status = 'leased'
    RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel_requested
), registered AS (
    -- a data-modifying CTE runs whether or not it is read, so an idle worker (no lease held) is
    -- registered too; slots in use are the leases this beat kept, not the ones it asked for
    INSERT INTO workers AS w (worker_id, host, pid, version, slots, slots_in_use, started_at, last_beat_at,
                              wake_channel)
    VALUES (:worker_id, :host, :pid, :version, :slots, (SELECT count(*) FROM renewed), now(), now(),
            :wake_channel)
    ON CONFLICT (worker_id) DO UPDATE
       SET slots_in_use = excluded.slots_in_use, last_beat_at = now()
)
SELECT held.run_id, renewed.id IS NOT NULL AS kept,
       coalesce(renewed.cancel_requested, false) AS cancel,
       -- idle workers share the poll (app/worker/runner.py): the fleet's polls, not each one's
       (SELECT count(*) FROM workers WHERE slots_in_use < slots) AS idle_workers
  FROM (VALUES (1)) AS one(x)
  LEFT JOIN held ON true
  LEFT JOIN renewed ON renewed.id = held.run_id;

-- name: bound_idle_transaction
-- A transaction others wait on ends after one lease of idleness if its process stops (see claims.py).
SELECT set_config('idle_in_transaction_session_timeout', :ms, true);
