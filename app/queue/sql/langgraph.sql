-- LangGraph's checkpoints and pending writes (app/queue/graph_checkpoints.py, for the saver in
-- app/agents/langgraph/saver.py). A write of a runq attempt carries the run's id and its
-- claim's lease_id and is fenced like every worker write (§1); :run_id null is the saver used
-- on its own, unfenced.

-- part: langgraph_lease
-- Defines lease: the run's row while the claim :lease_id holds it, share-locked until the
-- statement commits, so the reaper cannot expire the lease (nor another worker claim the run)
-- between the check and the write. No row for :run_id null, nor for a run rolled back while it
-- ran (its graph state is gone: roll_back_runs).
lease AS MATERIALIZED (
    SELECT id FROM agent_runs
     WHERE id = CAST(:run_id AS uuid) AND lease_id = CAST(:lease_id AS uuid) AND status = 'leased'
       AND cancel_reason IS DISTINCT FROM 'rolled_back'  -- its graph state was rolled back
       FOR SHARE
)

-- part: langgraph_pending_writes
-- Joins w: the pending writes of the checkpoint c as arrays, in the order LangGraph applies
-- them (writes_sort_key: task_path, task_id, idx).
LEFT JOIN LATERAL (
    SELECT array_agg(x.task_id ORDER BY x.task_path, x.task_id, x.idx) AS task_ids,
           array_agg(x.channel ORDER BY x.task_path, x.task_id, x.idx) AS channels,
           array_agg(x.type ORDER BY x.task_path, x.task_id, x.idx) AS types,
           array_agg(x.blob ORDER BY x.task_path, x.task_id, x.idx) AS blobs
      FROM langgraph_checkpoint_writes x
     WHERE x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
       AND x.checkpoint_id = c.checkpoint_id
) w ON true

-- name: langgraph_put_checkpoint_if_leased
-- Store a checkpoint, fenced by the lease (held is false and nothing is written once it is
-- lost), and keep only the newest :keep of its thread and namespace (all with :keep null) and
-- the newest of an earlier run, their pending writes with them. The new row is not in the statement's snapshot: the
-- :keep - 1 newest older ones stay beside it.
WITH ${part:langgraph_lease},
put AS (
    INSERT INTO langgraph_checkpoints
           (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, run_id)
    SELECT :thread_id, :checkpoint_ns, :checkpoint_id, CAST(:parent_checkpoint_id AS text), :type,
           CAST(:checkpoint AS bytea), CAST(:metadata AS jsonb), CAST(:run_id AS uuid)
     WHERE CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
       SET parent_checkpoint_id = excluded.parent_checkpoint_id, type = excluded.type,
           checkpoint = excluded.checkpoint, metadata = excluded.metadata, run_id = excluded.run_id
    RETURNING checkpoint_id
), pruned AS (
    DELETE FROM langgraph_checkpoints c
     WHERE c.thread_id = :thread_id AND c.checkpoint_ns = :checkpoint_ns
       AND CAST(:keep AS int) IS NOT NULL AND EXISTS (SELECT 1 FROM put)
       AND c.checkpoint_id IN (
           SELECT o.checkpoint_id FROM langgraph_checkpoints o
            WHERE o.thread_id = :thread_id AND o.checkpoint_ns = :checkpoint_ns
              AND o.checkpoint_id < :checkpoint_id
            ORDER BY o.checkpoint_id DESC
           OFFSET CAST(:keep AS int) - 1)
       -- the newest one of an earlier run stays: the state a rollback of this run goes back to
       AND c.checkpoint_id IS DISTINCT FROM (
           SELECT max(o.checkpoint_id) FROM langgraph_checkpoints o
            WHERE o.thread_id = :thread_id AND o.checkpoint_ns = :checkpoint_ns
              AND o.run_id IS DISTINCT FROM CAST(:run_id AS uuid))
    RETURNING c.checkpoint_id
), pruned_writes AS (
    DELETE FROM langgraph_checkpoint_writes x
     WHERE x.thread_id = :thread_id AND x.checkpoint_ns = :checkpoint_ns
       AND x.checkpoint_id IN (SELECT checkpoint_id FROM pruned)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM put) AS held,
       (SELECT count(*) FROM pruned) AS pruned;

-- name: langgraph_put_writes_if_leased
-- Store one task's pending writes of a checkpoint, fenced by the lease. Special channels
-- (errors, interrupts, resumes: :replace) overwrite an earlier write of the same index, the
-- others keep the first one, as LangGraph's own savers do.
WITH ${part:langgraph_lease},
put AS (
    INSERT INTO langgraph_checkpoint_writes AS x
           (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
    SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :task_id, w.idx, :task_path, w.channel, w.type, w.blob
      FROM unnest(CAST(:idxs AS int[]), CAST(:channels AS text[]), CAST(:types AS text[]),
                  CAST(:blobs AS bytea[])) AS w(idx, channel, type, blob)
     WHERE CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
       SET channel = excluded.channel, type = excluded.type, blob = excluded.blob
     WHERE CAST(:replace AS boolean)
    RETURNING 1
)
SELECT CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease) AS held,
       (SELECT count(*) FROM put) AS written;

-- name: langgraph_get_checkpoint
-- One checkpoint by id, with its pending writes.
SELECT c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint, c.metadata, c.run_id,
       w.task_ids, w.channels, w.types, w.blobs
  FROM langgraph_checkpoints c
  ${part:langgraph_pending_writes}
 WHERE c.thread_id = :thread_id AND c.checkpoint_ns = :checkpoint_ns AND c.checkpoint_id = :checkpoint_id;

-- name: langgraph_get_latest_checkpoint
-- A thread's newest checkpoint in a namespace, with its pending writes.
SELECT c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint, c.metadata, c.run_id,
       w.task_ids, w.channels, w.types, w.blobs
  FROM (SELECT * FROM langgraph_checkpoints
         WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
         ORDER BY checkpoint_id DESC
         LIMIT 1) c
  ${part:langgraph_pending_writes};

-- name: langgraph_list_checkpoints
-- Checkpoints newest first, each condition applying only when given (LangGraph's list: a
-- thread, a namespace, one id, a metadata filter, before an id, a limit).
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type,
       c.checkpoint, c.metadata, w.task_ids, w.channels, w.types, w.blobs
  FROM (SELECT * FROM langgraph_checkpoints
         WHERE (CAST(:thread_id AS text) IS NULL OR thread_id = :thread_id)
           AND (CAST(:checkpoint_ns AS text) IS NULL OR checkpoint_ns = :checkpoint_ns)
           AND (CAST(:checkpoint_id AS text) IS NULL OR checkpoint_id = :checkpoint_id)
           AND (CAST(:filter AS jsonb) IS NULL OR metadata @> CAST(:filter AS jsonb))
           AND (CAST(:before AS text) IS NULL OR checkpoint_id < :before)
         ORDER BY checkpoint_id DESC
         LIMIT CAST(:limit AS int)) c
  ${part:langgraph_pending_writes}
 ORDER BY c.checkpoint_id DESC;

-- name: langgraph_delete_threads
-- Every checkpoint and pending write of the threads.
WITH writes AS (
    DELETE FROM langgraph_checkpoint_writes WHERE thread_id = ANY(CAST(:thread_ids AS text[]))
)
DELETE FROM langgraph_checkpoints WHERE thread_id = ANY(CAST(:thread_ids AS text[]));

-- name: langgraph_delete_for_runs
-- The checkpoints LangGraph's runs wrote (metadata run_id), and their pending writes.
WITH gone AS (
    DELETE FROM langgraph_checkpoints
     WHERE metadata ->> 'run_id' = ANY(CAST(:run_ids AS text[]))
    RETURNING thread_id, checkpoint_ns, checkpoint_id
)
DELETE FROM langgraph_checkpoint_writes x
 USING gone
 WHERE x.thread_id = gone.thread_id AND x.checkpoint_ns = gone.checkpoint_ns
   AND x.checkpoint_id = gone.checkpoint_id;

-- name: langgraph_keep_latest
-- Keep only each namespace's newest checkpoint of the threads, and its pending writes.
WITH latest AS (
    SELECT DISTINCT ON (thread_id, checkpoint_ns) thread_id, checkpoint_ns, checkpoint_id
      FROM langgraph_checkpoints
     WHERE thread_id = ANY(CAST(:thread_ids AS text[]))
     ORDER BY thread_id, checkpoint_ns, checkpoint_id DESC
), writes AS (
    DELETE FROM langgraph_checkpoint_writes x
     WHERE x.thread_id = ANY(CAST(:thread_ids AS text[]))
       AND NOT EXISTS (SELECT 1 FROM latest l
                        WHERE l.thread_id = x.thread_id AND l.checkpoint_ns = x.checkpoint_ns
                          AND l.checkpoint_id = x.checkpoint_id)
)
DELETE FROM langgraph_checkpoints c
 WHERE c.thread_id = ANY(CAST(:thread_ids AS text[]))
   AND NOT EXISTS (SELECT 1 FROM latest l
                    WHERE l.thread_id = c.thread_id AND l.checkpoint_ns = c.checkpoint_ns
                      AND l.checkpoint_id = c.checkpoint_id);

-- name: langgraph_copy_thread
-- A copy of every checkpoint and pending write of one thread under another thread id.
WITH writes AS (
    INSERT INTO langgraph_checkpoint_writes
           (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
    SELECT :target, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob
      FROM langgraph_checkpoint_writes WHERE thread_id = :source
    ON CONFLICT DO NOTHING
)
INSERT INTO langgraph_checkpoints
       (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, run_id)
SELECT :target, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, run_id
  FROM langgraph_checkpoints WHERE thread_id = :source
ON CONFLICT DO NOTHING;
