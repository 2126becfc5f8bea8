-- Schedules: create, read, pause, delete, and the reaper pass that turns due slots into runs.
-- The slot's time is the run's idempotency key, so a slot makes one run however often it fires.

-- name: database_now
-- The database's clock: every slot is computed against it, never a process's own.
SELECT now();

-- name: create_schedule
-- A new schedule, first due at :next_run_at, unless the tenant is at its max_schedules
-- (runq_admit_schedule, migration 0025, counts under the tenant's bucket row lock, so
-- concurrent creates count in turn): then nothing is inserted and at_cap is that limit.
WITH gate AS MATERIALIZED (
    SELECT runq_admit_schedule(:tenant_id, :max_schedules) AS at_cap
), ins AS (
    INSERT INTO schedules (tenant_id, cron, every_s, timezone, agent, input_json, budget_json,
                           priority, max_attempts, thread_id, webhook, next_run_at, ends_at)
    SELECT :tenant_id, :cron, :every_s, :timezone, :agent, CAST(:input AS jsonb),
           CAST(:budget AS jsonb), :priority, :max_attempts, :thread_id, CAST(:webhook AS jsonb),
           :next_run_at, :ends_at
      FROM gate
     WHERE gate.at_cap IS NULL
    RETURNING *
)
SELECT gate.at_cap, ins.* FROM gate LEFT JOIN ins ON true;

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

-- name: update_schedule
-- A locked schedule's new timing, end, run input, webhook and pause, due at :next_run_at (set by
-- the caller: the first slot after now when the timing changed or a pause ended, else unchanged).
UPDATE schedules
   SET cron = :cron, every_s = :every_s, timezone = :timezone, ends_at = :ends_at,
       input_json = CAST(:input AS jsonb), webhook = CAST(:webhook AS jsonb), paused = :paused,
       next_run_at = :next_run_at, updated_at = now()
 WHERE id = :id
RETURNING *;

-- part: schedules_matching
-- The tenant's schedules matching each filter given (null: any): :agents, the agents their
-- runs may be of; :input_contains, a JSON object their run input contains ('{}': any).
(CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
 AND (CAST(:agents AS text[]) IS NULL OR agent = ANY(CAST(:agents AS text[])))
 AND (CAST(:thread_id AS uuid) IS NULL OR thread_id = CAST(:thread_id AS uuid))
 AND (CAST(:paused AS boolean) IS NULL OR paused = CAST(:paused AS boolean))
 AND input_json @> CAST(:input_contains AS jsonb)

-- name: search_schedules
-- One page of the schedules matching, ordered by :sort_by (created_at | updated_at |
-- next_run_at), descending or not, then by id.
SELECT * FROM schedules
 WHERE ${part:schedules_matching}
 ORDER BY CASE WHEN CAST(:descending AS boolean) THEN
               CASE :sort_by WHEN 'updated_at' THEN updated_at WHEN 'next_run_at' THEN next_run_at
                             ELSE created_at END
          END DESC,
          CASE WHEN NOT CAST(:descending AS boolean) THEN
               CASE :sort_by WHEN 'updated_at' THEN updated_at WHEN 'next_run_at' THEN next_run_at
                             ELSE created_at END
          END,
          id
 LIMIT :limit OFFSET :offset;

-- name: count_schedules
-- How many schedules match.
SELECT count(*) FROM schedules WHERE ${part:schedules_matching};

-- name: delete_schedule
-- Delete a schedule of the tenant; the runs it made stay (their schedule_id dangles on purpose).
DELETE FROM schedules
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
RETURNING id;

-- name: due_schedules
-- Reaper pass: schedules whose slot has come and that are not held back (not_before: parked,
-- or refused by their tenant's create limits), locked until the pass commits. The oldest slot
-- first, so a tenant's schedules take its create tokens in turn.
SELECT *, now() AS db_now FROM schedules
 WHERE NOT paused AND greatest(next_run_at, not_before) <= now()
   AND (ends_at IS NULL OR next_run_at <= ends_at)  -- an ended schedule fires no more
 ORDER BY next_run_at
 LIMIT :batch
   FOR UPDATE SKIP LOCKED;

-- name: next_schedule_due_in
-- Seconds until the reaper should look at the earliest active schedule (negative when due),
-- for its sleep: a held schedule counts from when it is let go, so it does not spin the reaper.
SELECT extract(epoch FROM min(greatest(next_run_at, not_before)) - now())::float8
  FROM schedules WHERE NOT paused AND (ends_at IS NULL OR next_run_at <= ends_at);

-- name: park_schedules
-- Schedules the pass could not fire: the reason shown (error, error_at) and the schedule left
-- alone for :retry_s, so it never heads the due ones; once fixed, it fires then.
UPDATE schedules s
   SET error = p.reason, error_at = now(), not_before = now() + make_interval(secs => :retry_s),
       updated_at = now()
  FROM unnest(CAST(:ids AS uuid[]), CAST(:reasons AS text[])) AS p(id, reason)
 WHERE s.id = p.id;

-- name: lock_slot_owners
-- Before a pass fires its slots: their threads, then their tenants' create buckets, locked in
-- the order an API create in a thread takes them (the thread, then the bucket in
-- runq_admit_create), so the pass and a create never wait on each other in a cycle. With the
-- buckets held, no create of those tenants commits before the pass does, and fire_schedules,
-- a statement of its own, counts every run they have queued.
WITH threads_locked AS MATERIALIZED (
    SELECT th.id FROM threads th
     WHERE th.id IN (SELECT thread_id FROM schedules WHERE id = ANY(CAST(:ids AS uuid[])))
     ORDER BY th.id
       FOR UPDATE
), buckets_locked AS MATERIALIZED (
    -- the threads' count gates the scan: threads first
    SELECT b.tenant_id FROM tenant_buckets b
     WHERE b.tenant_id IN (SELECT tenant_id FROM schedules WHERE id = ANY(CAST(:ids AS uuid[])))
       AND (SELECT count(*) FROM threads_locked) >= 0
     ORDER BY b.tenant_id
       FOR UPDATE
)
SELECT count(*) FROM buckets_locked;

-- name: fire_schedules
-- One pending run per due schedule for its slot, keyed by it (a repeat of a slot inserts
-- nothing), each with its run.queued; the schedule moved to its next slot, its error cleared;
-- idle workers woken. A slot is a create like the API's: it goes through runq_admit_create
-- (migrations 0017, 0020: the tenant's create rate and max_pending, under its bucket's row
-- lock) in this statement, so a statement rolled back gives its tokens back. A slot refused
-- stays due, held until the limit's Retry-After (held_s); when it fires, it is the latest
-- slot that has come by then. One row per schedule.
WITH due AS MATERIALIZED (
    SELECT s.*, f.slot_key, f.next_at, f.ord,
           -- a deleted thread takes no run: the schedule only moves on
           s.thread_id IS NULL OR EXISTS (SELECT 1 FROM threads th WHERE th.id = s.thread_id) AS makes_run
      FROM unnest(CAST(:ids AS uuid[]), CAST(:slot_keys AS text[]), CAST(:next_ats AS timestamptz[]))
           WITH ORDINALITY AS f(id, slot_key, next_at, ord)
      JOIN schedules s ON s.id = f.id
), room AS MATERIALIZED (
    -- max_pending: runq_admit_create's recount cannot see the runs this very statement inserts,
    -- so each capped tenant's room is counted here once (its bucket locked before this
    -- statement: lock_slot_owners), and no more of its slots than that are admitted; the
    -- others are held as the function would hold them (1 s)
    SELECT t.tenant_id, c.cap - runq_queued_runs(t.tenant_id, c.cap) AS left_
      FROM (SELECT DISTINCT tenant_id FROM due WHERE makes_run) t
      LEFT JOIN tenant_buckets b ON b.tenant_id = t.tenant_id
     CROSS JOIN LATERAL (SELECT coalesce(b.max_pending, :limit_max_pending) AS cap) c
     WHERE c.cap > 0
), pick AS MATERIALIZED (
    SELECT due.*,
           coalesce(due.makes_run AND r.left_ < row_number() OVER (PARTITION BY due.tenant_id, due.makes_run
                                                                  ORDER BY due.ord), false) AS no_room
      FROM due LEFT JOIN room r ON r.tenant_id = due.tenant_id
), gate AS MATERIALIZED (
    -- in the pass's order, so a tenant's oldest slot takes its first token
    SELECT p.id, a.limit_refused, a.limit_retry_after_s, a.rank_delay_s
      FROM (SELECT * FROM pick WHERE makes_run AND NOT no_room ORDER BY ord) p
      LEFT JOIN LATERAL runq_admit_create(p.tenant_id, p.slot_key, :limit_per_s, :limit_burst,
                                          :limit_max_pending) a ON true
), held AS (
    SELECT pick.id, CASE WHEN pick.no_room THEN 1.0 ELSE gate.limit_retry_after_s END AS held_s
      FROM pick LEFT JOIN gate ON gate.id = pick.id
     WHERE pick.no_room OR gate.limit_refused IS NOT NULL
), admitted AS (
    SELECT pick.*, gate.rank_delay_s FROM pick JOIN gate ON gate.id = pick.id
     WHERE gate.limit_refused IS NULL
), turns AS (
    -- threads (§8): a schedule's runs join its thread's queue (enqueue); the thread's row lock
    -- hands out their turns, as for the API's creates
    UPDATE threads th
       SET run_count = th.run_count + c.n, updated_at = now()
      FROM (SELECT thread_id, count(*) AS n FROM admitted WHERE thread_id IS NOT NULL GROUP BY thread_id) c
     WHERE th.id = c.thread_id
    RETURNING th.id, th.run_count - c.n AS base
), ins AS (
    INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,
                            input_json, budget_json, idempotency_key, webhook, schedule_id,
                            thread_id, thread_turn, last_event_seq)
    SELECT a.tenant_id, a.agent, a.priority, a.max_attempts, now(),
           -- as an API create: how far into its burst a rate-limited tenant's create went
           now() + make_interval(secs => coalesce(a.rank_delay_s, 0))
               - make_interval(secs => a.priority * CAST(:aging_s AS float8)),
           a.input_json, a.budget_json, a.slot_key, a.webhook, a.id,
           turns.id, turns.base + row_number() OVER (PARTITION BY turns.id ORDER BY a.id), 1
      FROM admitted a LEFT JOIN turns ON turns.id = a.thread_id
     WHERE a.thread_id IS NULL OR turns.id IS NOT NULL  -- its thread deleted meanwhile
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, schedule_id, history_at
),
${part:queued_events},
moved AS (
    UPDATE schedules s
       SET next_run_at = CASE WHEN h.id IS NULL THEN due.next_at ELSE s.next_run_at END,
           not_before = CASE WHEN h.id IS NULL THEN NULL ELSE now() + make_interval(secs => h.held_s) END,
           error = CASE WHEN h.id IS NULL THEN NULL ELSE s.error END,
           error_at = CASE WHEN h.id IS NULL THEN NULL ELSE s.error_at END,
           last_run_id = coalesce(ins.id, s.last_run_id), updated_at = now()
      FROM due LEFT JOIN held h ON h.id = due.id LEFT JOIN ins ON ins.schedule_id = due.id
     WHERE s.id = due.id
    RETURNING s.id AS schedule_id, ins.id AS run_id, h.held_s
), woken AS MATERIALIZED (
    SELECT runq_wake_workers((SELECT count(*) FROM ins)) AS sent
)
SELECT moved.* FROM moved
 WHERE (SELECT count(*) FROM woken) >= 0;
