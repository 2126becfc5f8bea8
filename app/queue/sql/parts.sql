-- Pieces of SQL that statements of more than one file share, written once: the events, usage
-- and thread messages of append_events_if_leased and finish_if_leased, the run.queued events of
-- every enqueue, the outcome event of every ending, the page of every list (the claims' own parts
-- are in claims.sql, the threads' in threads.sql). A statement includes one as ${part:name}; each part says which names
-- it defines and which it reads from the statement around it. tests/golden/queue_sql.txt shows
-- the statements with their parts filled in.

-- part: buffered_events
-- Defines e: every attempt's buffered events, each with the lease it was buffered under (k
-- numbers one attempt's events from 1; the statement's input carries how many each has). A
-- batch can hold two attempts of one run: the flush of an attempt whose lease was lost beside
-- the first of the attempt that re-claimed the run. Only the events of the lease a run was
-- fenced by are written, numbered from its own last seq.
e AS (
    SELECT x.run_id, x.lease_id, x.type, x.data,
           row_number() OVER (PARTITION BY x.run_id, x.lease_id ORDER BY x.ord) AS k
      FROM unnest(CAST(:event_run_ids AS uuid[]), CAST(:event_lease_ids AS uuid[]),
                  CAST(:types AS text[]), CAST(:datas AS jsonb[]))
              WITH ORDINALITY AS x(run_id, lease_id, type, data, ord)
)

-- part: usage_deltas
-- Defines u: what each run consumed since its last stored write (docs/usage.md). It is sent
-- with a checkpoint or an ending only, so what an attempt used after its last checkpoint is
-- stored once: by its next checkpoint or ending, or (when the attempt is lost) by the attempt
-- that redoes it.
u AS (
    SELECT * FROM unnest(CAST(:usage_run_ids AS uuid[]), CAST(:usages AS jsonb[])) AS u(run_id, delta)
)

-- part: usage_added
-- An expression: the run r's usage with its delta from u added key by key.
coalesce((SELECT jsonb_object_agg(k, coalesce((r.usage ->> k)::bigint, 0)
                                     + coalesce((u.delta ->> k)::bigint, 0))
            FROM u, jsonb_object_keys(r.usage || u.delta) AS k
           WHERE u.run_id = r.id), r.usage)

-- part: tenant_usage_hourly
-- Defines hourly: the deltas of u per tenant and hour (admin stats: tokens over the last
-- 24 h), for the runs in t (those whose lease held); in tenant order, so statements of two
-- workers lock rows alike.
hourly AS (
    INSERT INTO tenant_usage_hourly AS h (tenant_id, hour, input_tokens, output_tokens, model_calls, tool_calls)
    SELECT r.tenant_id, date_trunc('hour', now()),
           sum(coalesce((u.delta ->> 'input_tokens')::bigint, 0)),
           sum(coalesce((u.delta ->> 'output_tokens')::bigint, 0)),
           sum(coalesce((u.delta ->> 'model_calls')::bigint, 0)),
           sum(coalesce((u.delta ->> 'tool_calls')::bigint, 0))
      FROM u JOIN t ON t.id = u.run_id JOIN agent_runs r ON r.id = u.run_id
     GROUP BY r.tenant_id
     ORDER BY r.tenant_id
    ON CONFLICT (tenant_id, hour) DO UPDATE
       SET input_tokens = h.input_tokens + excluded.input_tokens,
           output_tokens = h.output_tokens + excluded.output_tokens,
           model_calls = h.model_calls + excluded.model_calls,
           tool_calls = h.tool_calls + excluded.tool_calls
)

-- part: thread_messages
-- Defines m, the messages each attempt added since its last stored write (threads, §8; ord
-- their order; a batch may hold a lost attempt's write beside its successor's), and thread_locked: their threads, locked before the runs, as the API's thread routes
-- lock them (a thread, then its runs), so the two never deadlock.
m AS (
    SELECT x.run_id, x.lease_id, x.message, x.ord
      FROM unnest(CAST(:message_run_ids AS uuid[]), CAST(:message_lease_ids AS uuid[]),
                  CAST(:messages AS jsonb[]))
              WITH ORDINALITY AS x(run_id, lease_id, message, ord)
), thread_locked AS MATERIALIZED (
    SELECT th.id FROM threads th
     WHERE th.id IN (SELECT r.thread_id FROM agent_runs r WHERE r.id IN (SELECT m.run_id FROM m))
     ORDER BY th.id
       FOR UPDATE OF th
)

-- part: thread_messages_added
-- Defines mt, counted and added: the messages of m whose run is in t with keeps_messages (the
-- statement says when: with a checkpoint, or an ending that keeps them) and not being rolled
-- back, appended to their threads' history, numbered after it (k numbers them per thread, n
-- counts them; gapless under the row lock taken in thread_locked).
mt AS (
    SELECT t.thread_id, m.run_id, m.message,
           row_number() OVER (PARTITION BY t.thread_id ORDER BY t.id, m.ord) AS k,
           count(*) OVER (PARTITION BY t.thread_id) AS n
      FROM t JOIN m ON m.run_id = t.id AND m.lease_id = t.lease_id
     WHERE t.keeps_messages AND t.thread_id IS NOT NULL
       AND t.cancel_reason IS DISTINCT FROM 'rolled_back'
), counted AS (
    UPDATE threads th
       SET message_count = th.message_count + c.n, updated_at = now()
      FROM (SELECT thread_id, max(n) AS n FROM mt GROUP BY thread_id) c
     WHERE th.id = c.thread_id
    RETURNING th.id, th.message_count - c.n AS first_idx
), added AS (
    INSERT INTO thread_messages (thread_id, idx, role, message, run_id)
    SELECT mt.thread_id, counted.first_idx + mt.k - 1, mt.message ->> 'role', mt.message, mt.run_id
      FROM mt JOIN counted ON counted.id = mt.thread_id
    RETURNING thread_id
)

-- part: queued_events
-- Defines queued: the run.queued event, the first of its log, of every run inserted in ins.
queued AS (
    INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)
    SELECT id, 1, 'run.queued', '{}'::jsonb, 0, history_at FROM ins
    RETURNING run_id
)

-- part: outcome_event
-- The select list of the outcome event (run.completed, run.retrying, ...) that a run t's new
-- status announces, at its last_event_seq, with what the status ended with: written alike by
-- the worker's endings and by the reaper's.
SELECT t.id, t.last_event_seq,
       CASE t.status WHEN 'done' THEN 'run.completed'
                     WHEN 'pending' THEN 'run.retrying'
                     WHEN 'cancelled' THEN 'run.cancelled'
                     WHEN 'waiting' THEN 'run.waiting'
                     ELSE 'run.failed' END,
       CASE t.status
            WHEN 'done' THEN jsonb_build_object('output', t.output)
            WHEN 'waiting' THEN t.waitpoint
            WHEN 'pending' THEN jsonb_build_object('attempt', t.attempts, 'error_code', t.error_code,
                                                   'available_at', t.available_at)
            WHEN 'cancelled' THEN jsonb_build_object('reason', t.cancel_reason)
            ELSE jsonb_build_object('error_code', t.error_code, 'error_message', t.error_message) END,
       t.attempts, t.history_at

-- part: page_after_cursor
-- The end of a list: the rows after the keyset cursor (created_at, id) of the last row seen
-- (codec.page_params), newest first, one page of them; it follows the list's WHERE.
AND (created_at, id) < (:before_at, :before_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit
