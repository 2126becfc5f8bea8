-- The API's statements about a run as a whole: create it, read it, list them, ask it to stop.

-- name: enqueue
-- A pending run and its run.queued (seq 1); nothing when the tenant's idempotency key is taken.
-- In a thread (its row locked by the caller), the run takes the thread's next turn.
-- runq_wake_workers (migration 0012) wakes one idle worker, or all when none is registered free.
-- Tenant limits (migrations 0017, 0020): runq_admit_create refuses the create with one row (its
-- limit, Retry-After, policy) when the tenant is over one, and nothing is inserted; a
-- rate-limited tenant's admitted create gets a row with its rank_delay_s. Every answer is one
-- row, the run's columns null unless it was created.
WITH gate AS MATERIALIZED (
    SELECT * FROM runq_admit_create(:tenant_id, :idempotency_key, :limit_per_s, :limit_burst,
                                    :limit_max_pending)
), ins AS (
    INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,
                            input_json, budget_json, idempotency_key, request_hash,
                            on_disconnect, disconnect_grace_s, webhook, thread_id, thread_turn,
                            last_event_seq, traceparent)
    SELECT :tenant_id, :agent, :priority, :max_attempts,
            now() + make_interval(secs => :delay_s),
            -- queue_rank is available_at minus priority x aging, plus how far into its burst a
            -- rate-limited tenant's create went: one ascending key, one index
            now() + make_interval(secs => :delay_s + coalesce(gate.rank_delay_s, 0))
                - make_interval(secs => CAST(:priority AS int) * CAST(:aging_s AS float8)),
            CAST(:input AS jsonb), CAST(:budget AS jsonb), :idempotency_key, :request_hash,
            :on_disconnect, :disconnect_grace_s, CAST(:webhook AS jsonb),
            CAST(:thread_id AS uuid), CAST(:thread_turn AS bigint), 1,
            :traceparent  -- the creating request's trace context (docs/usage.md)
      FROM (SELECT) one LEFT JOIN gate ON true
     WHERE gate.limit_refused IS NULL
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
),
${part:queued_events},
turn_taken AS (
    -- threads (§8): the thread's turn counter (nothing for a run without a thread)
    UPDATE threads th
       SET run_count = ins.thread_turn, updated_at = now()
      FROM ins
     WHERE th.id = ins.thread_id
)
SELECT ins.*, gate.*, CASE WHEN ins.id IS NOT NULL THEN runq_wake_workers(1) END
  FROM (SELECT) one LEFT JOIN gate ON true LEFT JOIN ins ON true;

-- name: enqueue_many
-- Many pending runs of one agent, each with its run.queued; idle workers with free slots for
-- them are woken once.
WITH ins AS (
    INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,
                            input_json, last_event_seq)
    SELECT :tenant_id, :agent, :priority, :max_attempts,
           now() + make_interval(secs => :delay_s),
           now() + make_interval(secs => :delay_s)
               - make_interval(secs => CAST(:priority AS int) * CAST(:aging_s AS float8)),
           i.input, 1
      FROM unnest(CAST(:inputs AS jsonb[])) WITH ORDINALITY AS i(input, ord)
     ORDER BY i.ord
    RETURNING id, history_at
),
${part:queued_events}
SELECT (SELECT array_agg(id) FROM ins) AS ids, runq_wake_workers((SELECT count(*) FROM ins));

-- name: analyze_runs
-- Fresh statistics after a bulk enqueue, counting its uncommitted rows (see runs.py).
ANALYZE agent_runs;

-- name: analyze_lock_timeout
-- The ANALYZE never waits long on an autovacuum holding the table's lock.
SET LOCAL lock_timeout = '500ms';

-- name: get_by_idempotency_key
-- The run an earlier request with this idempotency key created, with its request digest.
SELECT * FROM agent_runs
 WHERE tenant_id = :tenant_id AND idempotency_key = :idempotency_key;

-- name: get_run
-- One run; a null tenant (admin, worker) sees every tenant's runs.
SELECT * FROM agent_runs
 WHERE id = :run_id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id);

-- name: delete_finished_run
-- A finished run of the tenant, deleted (LangGraph's DELETE of a run, §17): its records go by
-- cascade, its events by trigger, and the LangGraph checkpoints it wrote with it, as LangGraph's
-- server deletes them (its thread's messages stay). No row while it is in flight, or none.
WITH run AS (
    DELETE FROM agent_runs
     WHERE id = :run_id AND tenant_id = :tenant_id AND status IN ('done', 'dead', 'cancelled')
    RETURNING id, COALESCE(thread_id, id) AS graph_thread  -- a run of no thread is its own
), graph_gone AS (
    DELETE FROM langgraph_checkpoints c
     USING run
     WHERE c.thread_id = CAST(run.graph_thread AS text) AND c.run_id = run.id
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id
), graph_writes_gone AS (
    DELETE FROM langgraph_checkpoint_writes x
     USING graph_gone g
     WHERE x.thread_id = g.thread_id AND x.checkpoint_ns = g.checkpoint_ns AND x.checkpoint_id = g.checkpoint_id
)
SELECT id FROM run;

-- name: list_runs
-- Newest first, one page after the cursor. The list indexes leave leased runs out (so a claim
-- adds no entry to them, docs/schema.md): the page merges the other runs' page, an ordered walk
-- of a list index that stops at the limit, with the leased runs' page, the few of them read
-- through ix_agent_runs_leased and sorted. A list of leased runs only skips the walk.
WITH listed AS NOT MATERIALIZED (
    SELECT * FROM agent_runs
     WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
       AND (CAST(:status AS text) IS NULL OR status = :status)
)
(SELECT * FROM listed WHERE status <> 'leased' AND CAST(:status AS text) IS DISTINCT FROM 'leased'
   ${part:page_after_cursor})
UNION ALL
(SELECT * FROM listed WHERE status = 'leased'
   ${part:page_after_cursor})
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: request_cancel
-- Stop runs: a pending or waiting one is cancelled at once (run.cancel_requested, run.cancelled,
-- its waitpoint closed); a leased
-- one only asks (run.cancel_requested), and the worker holding it, woken on the cancel
-- channel, finishes it. A repeat while a cancel is under way, or a finished run, changes nothing.
WITH t AS (
    -- on the right of SET, status is the old one
    UPDATE agent_runs
       SET status = CASE WHEN status IN ('pending', 'waiting') THEN 'cancelled' ELSE status END,
           finished_at = CASE WHEN status IN ('pending', 'waiting') THEN now() ELSE finished_at END,
           waitpoint = NULL,
           cancel_requested_at = now(), cancel_reason = :reason,
           last_event_seq = last_event_seq + cardinality(CAST(:types AS text[]))
                            + CASE WHEN status IN ('pending', 'waiting') THEN 1 ELSE 0 END,
           updated_at = now()
     WHERE id = ANY(CAST(:run_ids AS uuid[]))
       AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
       AND (status IN ('pending', 'waiting') OR (status = 'leased' AND cancel_requested_at IS NULL))
    RETURNING *
), closed AS (
    -- waits: a cancelled run's open waitpoint can no longer be resumed
    UPDATE waitpoints w SET cancelled_at = now()
      FROM t
     WHERE w.run_id = t.id AND t.status = 'cancelled' AND w.resumed_at IS NULL AND w.cancelled_at IS NULL
    RETURNING w.run_id
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT t.id, t.last_event_seq - CASE t.status WHEN 'cancelled' THEN 1 ELSE 0 END
                 - cardinality(CAST(:types AS text[])) + e.ord,
           e.type, e.data, t.attempts, t.history_at
      FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS e(type, data, ord)
    UNION ALL
    SELECT t.id, t.last_event_seq, 'run.cancelled', jsonb_build_object('reason', t.cancel_reason), t.attempts,
           t.history_at
      FROM t
     WHERE t.status = 'cancelled'
    RETURNING run_id
)
SELECT t.*, pg_notify('${events_channel}', t.id::text || ':' || t.last_event_seq),
       CASE WHEN t.status = 'leased' THEN pg_notify('${cancel_channel}', t.id::text) END
  FROM t;
