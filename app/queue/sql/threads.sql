-- Threads (conversations): create, read, list, their history, and what a new run of a busy
-- thread does to the runs in flight. A thread's runs and its messages change under the
-- thread's row lock, taken before any run's (the worker's fenced statements lock the same way).

-- part: thread_out
-- A thread t as the API shows it: busy while a run of it is not terminal, and its last run.
t.*, EXISTS (SELECT 1 FROM agent_runs r
              WHERE r.thread_id = t.id AND r.status NOT IN ('done', 'dead', 'cancelled')) AS busy,
(SELECT r.id FROM agent_runs r WHERE r.thread_id = t.id AND r.thread_id IS NOT NULL
  ORDER BY r.thread_turn DESC LIMIT 1) AS last_run_id

-- name: create_thread
-- A new thread; no row when the tenant's idempotency key or chat id is taken.
INSERT INTO threads (tenant_id, metadata, idempotency_key, request_hash, chat_id)
VALUES (:tenant_id, CAST(:metadata AS jsonb), :idempotency_key, :request_hash, :chat_id)
ON CONFLICT DO NOTHING
RETURNING *, false AS busy, CAST(NULL AS uuid) AS last_run_id;

-- name: get_thread_by_chat_id
-- The tenant's thread a chat frontend named :chat_id, busy while a run of it is not terminal.
SELECT ${part:thread_out}
  FROM threads t
 WHERE t.tenant_id = :tenant_id AND t.chat_id = :chat_id;

-- name: get_thread_by_idempotency_key
-- The thread an earlier request with this idempotency key created, with its request digest.
SELECT ${part:thread_out}
  FROM threads t
 WHERE t.tenant_id = :tenant_id AND t.idempotency_key = :idempotency_key;

-- name: get_thread
-- One thread, busy while a run of it is not terminal; a null tenant (operators) sees all.
SELECT ${part:thread_out}
  FROM threads t
 WHERE t.id = :thread_id AND (CAST(:tenant_id AS text) IS NULL OR t.tenant_id = :tenant_id);

-- name: lock_thread
-- One thread of the tenant, locked until the transaction ends: its runs are created, cancelled
-- and deleted one request at a time (two reject creates on an idle thread make one run).
SELECT t.* FROM threads t
 WHERE t.id = :thread_id AND (CAST(:tenant_id AS text) IS NULL OR t.tenant_id = :tenant_id)
   FOR UPDATE OF t;

-- name: list_threads
-- Newest first, one page after the cursor.
SELECT ${part:thread_out}
  FROM threads t
 WHERE (CAST(:tenant_id AS text) IS NULL OR t.tenant_id = :tenant_id)
   ${part:page_after_cursor};

-- name: inflight_thread_runs
-- The thread's runs that are not terminal, in turn order (the partial index, not its history).
SELECT id, status FROM agent_runs
 WHERE thread_id = :thread_id AND thread_id IS NOT NULL AND status NOT IN ('done', 'dead', 'cancelled')
 ORDER BY thread_turn;

-- name: thread_messages
-- A page of the thread's history, oldest first, after :after (an index).
SELECT idx, message, run_id, created_at FROM thread_messages
 WHERE thread_id = :thread_id AND idx > :after
 ORDER BY idx
 LIMIT :limit;

-- name: thread_history
-- What an attempt sees as ctx.thread.messages: the history the runs before it wrote (its own
-- messages of an earlier attempt come back through its checkpoint instead).
SELECT message FROM thread_messages
 WHERE thread_id = :thread_id AND run_id IS DISTINCT FROM :run_id
 ORDER BY idx;

-- name: list_thread_runs
-- The thread's runs, newest (latest turn) first, below the turn of the last row seen.
SELECT * FROM agent_runs
 WHERE thread_id = :thread_id AND thread_id IS NOT NULL AND thread_turn < :before_turn
   AND (CAST(:status AS text) IS NULL OR status = :status)
 ORDER BY thread_turn DESC
 LIMIT :limit;

-- name: roll_back_runs
-- Rollback, regenerate: the messages of the runs go, and a leased one asked to stop earlier
-- (interrupted) writes none any more either, nor any graph state; the LangGraph checkpoints the
-- runs wrote in the thread's graph go too (the saver keeps the one before them, see
-- langgraph_put_checkpoint_if_leased), so the history and the graph's memory are as they were
-- before the runs, alike.
WITH gone AS (
    DELETE FROM thread_messages
     WHERE thread_id = :thread_id AND run_id = ANY(CAST(:run_ids AS uuid[]))
    RETURNING idx
), marked AS (
    -- a data-modifying CTE runs whether or not it is read
    UPDATE agent_runs SET cancel_reason = 'rolled_back', updated_at = now()
     WHERE id = ANY(CAST(:run_ids AS uuid[])) AND status = 'leased' AND cancel_requested_at IS NOT NULL
), graph_gone AS (
    DELETE FROM langgraph_checkpoints c
     WHERE c.thread_id = CAST(CAST(:thread_id AS uuid) AS text) AND c.run_id = ANY(CAST(:run_ids AS uuid[]))
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id
), graph_writes_gone AS (
    DELETE FROM langgraph_checkpoint_writes x
     USING graph_gone g
     WHERE x.thread_id = g.thread_id AND x.checkpoint_ns = g.checkpoint_ns AND x.checkpoint_id = g.checkpoint_id
)
-- the runs in flight wrote the tail of the history (a thread's runs execute in turn order)
UPDATE threads
   SET message_count = message_count - (SELECT count(*) FROM gone), updated_at = now()
 WHERE id = :thread_id;

-- name: delete_thread
-- Delete an idle thread; its messages and runs go by cascade (their events by trigger), and the
-- LangGraph checkpoints of its graph (LangGraph's thread id is the thread's) with them.
WITH graph_writes AS (
    DELETE FROM langgraph_checkpoint_writes WHERE thread_id = CAST(CAST(:thread_id AS uuid) AS text)
), graph_checkpoints AS (
    DELETE FROM langgraph_checkpoints WHERE thread_id = CAST(CAST(:thread_id AS uuid) AS text)
)
DELETE FROM threads WHERE id = :thread_id;

-- name: create_thread_with_id
-- A thread with the id its client chose (LangGraph's API, §17); no row when the id is taken.
INSERT INTO threads (id, tenant_id, metadata)
VALUES (:thread_id, :tenant_id, CAST(:metadata AS jsonb))
ON CONFLICT DO NOTHING
RETURNING *, false AS busy, CAST(NULL AS uuid) AS last_run_id;

-- name: merge_thread_metadata
-- The tenant's thread with :metadata merged into its own (keys given replace theirs).
UPDATE threads t
   SET metadata = t.metadata || CAST(:metadata AS jsonb), updated_at = now()
 WHERE t.id = :thread_id AND t.tenant_id = :tenant_id
RETURNING ${part:thread_out};

-- name: search_threads
-- The tenant's threads whose metadata contains :metadata (and whose id is one of :ids, when
-- given), ordered by :sort_by (created_at | updated_at | thread_id), descending or not, then by
-- id the same way; a page by offset.
SELECT ${part:thread_out}
  FROM threads t
 WHERE t.tenant_id = :tenant_id AND t.metadata @> CAST(:metadata AS jsonb)
   AND (CAST(:ids AS uuid[]) IS NULL OR t.id = ANY(CAST(:ids AS uuid[])))
 ORDER BY CASE WHEN CAST(:descending AS boolean) THEN
               CASE :sort_by WHEN 'created_at' THEN t.created_at WHEN 'updated_at' THEN t.updated_at END
          END DESC,
          CASE WHEN NOT CAST(:descending AS boolean) THEN
               CASE :sort_by WHEN 'created_at' THEN t.created_at WHEN 'updated_at' THEN t.updated_at END
          END,
          CASE WHEN CAST(:descending AS boolean) THEN t.id END DESC,
          CASE WHEN NOT CAST(:descending AS boolean) THEN t.id END
 LIMIT :limit OFFSET :offset;
