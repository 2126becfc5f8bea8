-- The worker registry: which worker processes are up, idle ones included (the heartbeat's
-- renew_leases writes their rows).

-- name: list_workers
-- Registered workers, newest first, for the admin workers view (their leases come from live_leases).
SELECT worker_id, host, pid, version, slots, slots_in_use, started_at, last_beat_at
  FROM workers
 ORDER BY started_at DESC, worker_id;

-- name: forget_worker
-- A worker's row on its clean exit (after its leases are released or finished).
DELETE FROM workers WHERE worker_id = :worker_id;

-- name: pass_wakeups
-- Wake-ups a worker was sent for free slots it no longer has (two creates picked it before its
-- claim marked them used): other workers with room are woken for them, as a create would.
SELECT runq_wake_workers(:runs);
