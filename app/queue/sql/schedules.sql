-- Schedules: create, read, pause, delete, and the reaper pass that turns due slots into runs.
-- The slot's time is the run's idempotency key, so a slot makes one run however often it fires.

-- name: database_now
-- The database's clock: every slot is computed against it, never a process's own.
SELECT now();

-- name: create_schedule
-- A new schedule, first due at :next_run_at.
INSERT INTO schedules (tenant_id, cron, every_s, timezone, agent, input_json, budget_json,
                       priority, max_attempts, thread_id, webhook, next_run_at)
VALUES (:tenant_id, :cron, :every_s, :timezone, :agent, CAST(:input AS jsonb),
        CAST(:budget AS jsonb), :priority, :max_attempts, :thread_id, CAST(:webhook AS jsonb),
        :next_run_at)
RETURNING *;

-- name: get_schedule
-- One schedule of the tenant; a null tenant (operators) sees every tenant's.
SELECT * FROM schedules
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id);

-- name: lock_schedule
-- One schedule of the tenant, locked for a change, with the database's clock.
SELECT *, now() AS db_now FROM schedules
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
   FOR UPDATE;

-- name: list_schedules
-- Newest first, one page after the cursor.
SELECT * FROM schedules
 WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
   ${part:page_after_cursor};

-- name: set_schedule_paused
-- Pause, or resume from the first slot after now (a paused period is not made up for).
UPDATE schedules
   SET paused = :paused, next_run_at = :next_run_at, updated_at = now()
 WHERE id = :id
RETURNING *;

-- name: delete_schedule
-- Delete a schedule of the tenant; the runs it made stay (their schedule_id dangles on purpose).
DELETE FROM schedules
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
RETURNING id;

-- name: due_schedules
-- Reaper pass: schedules whose next slot has come, locked until the pass commits.
SELECT *, now() AS db_now FROM schedules
 WHERE NOT paused AND next_run_at <= now()
 ORDER BY next_run_at
 LIMIT :batch
   FOR UPDATE SKIP LOCKED;

-- name: next_schedule_due_in
-- Seconds until the earliest active schedule's next slot (negative when due), for the reaper's sleep.
SELECT extract(epoch FROM min(next_run_at) - now())::float8 FROM schedules WHERE NOT paused;

-- name: fire_schedules
-- One pending run per due schedule, keyed by its slot (a repeat of a slot inserts nothing),
-- each with its run.queued; every schedule moved to its next slot; idle workers woken.
WITH due AS (
    SELECT s.*, f.slot_key, f.next_at
      FROM unnest(CAST(:ids AS uuid[]), CAST(:slot_keys AS text[]), CAST(:next_ats AS timestamptz[]))
           AS f(id, slot_key, next_at)
      JOIN schedules s ON s.id = f.id
), turns AS (
    -- threads (§8): a schedule's runs join its thread's queue (enqueue); the thread's row lock
    -- hands out their turns, as for the API's creates. A deleted thread takes no run.
    UPDATE threads th
       SET run_count = th.run_count + c.n, updated_at = now()
      FROM (SELECT thread_id, count(*) AS n FROM due WHERE thread_id IS NOT NULL GROUP BY thread_id) c
     WHERE th.id = c.thread_id
    RETURNING th.id, th.run_count - c.n AS base
), ins AS (
    INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,
                            input_json, budget_json, idempotency_key, webhook, schedule_id,
                            thread_id, thread_turn, last_event_seq)
    SELECT due.tenant_id, due.agent, due.priority, due.max_attempts, now(),
           now() - make_interval(secs => due.priority * CAST(:aging_s AS float8)),
           due.input_json, due.budget_json, due.slot_key, due.webhook, due.id,
           turns.id, turns.base + row_number() OVER (PARTITION BY turns.id ORDER BY due.id), 1
      FROM due LEFT JOIN turns ON turns.id = due.thread_id
     WHERE due.thread_id IS NULL OR turns.id IS NOT NULL
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, schedule_id, history_at
),
${part:queued_events},
advanced AS (
    UPDATE schedules s
       SET next_run_at = due.next_at, last_run_id = coalesce(ins.id, s.last_run_id), updated_at = now()
      FROM due LEFT JOIN ins ON ins.schedule_id = due.id
     WHERE s.id = due.id
    RETURNING s.id
), woken AS MATERIALIZED (
    SELECT runq_wake_workers((SELECT count(*) FROM ins)) AS sent
)
SELECT ins.id AS run_id, ins.schedule_id FROM ins
 WHERE (SELECT count(*) FROM woken) >= 0;
