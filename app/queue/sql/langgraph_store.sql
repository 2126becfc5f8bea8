-- LangGraph's store (app/queue/graph_store.py, for the BaseStore of app/agents/langgraph/store.py
-- and the /langgraph/store routes): a tenant's items by namespace path and key. An item past
-- its expires_at is gone for every read at once; the reaper pass deletes it later.

-- part: langgraph_store_matches
-- The item i's namespace starts with :prefix and ends with :suffix, a '*' label matching any.
(cardinality(i.namespace) >= cardinality(CAST(:prefix AS text[]))
 AND cardinality(i.namespace) >= cardinality(CAST(:suffix AS text[]))
 AND NOT EXISTS (
     SELECT 1 FROM unnest(CAST(:prefix AS text[])) WITH ORDINALITY AS p(label, n)
      WHERE p.label <> '*' AND p.label IS DISTINCT FROM i.namespace[p.n])
 AND NOT EXISTS (
     SELECT 1 FROM unnest(CAST(:suffix AS text[])) WITH ORDINALITY AS s(label, n)
      WHERE s.label <> '*'
        AND s.label IS DISTINCT FROM
            i.namespace[cardinality(i.namespace) - cardinality(CAST(:suffix AS text[])) + s.n]))

-- part: langgraph_store_refresh
-- Defines refreshed: the TTL of each of the hits that has one starts again from now (:refresh).
refreshed AS (
    UPDATE langgraph_store_items i
       SET expires_at = now() + make_interval(secs => i.ttl_minutes * 60)
      FROM hits h
     WHERE CAST(:refresh AS boolean) AND h.ttl_minutes IS NOT NULL
       AND i.tenant_id = h.tenant_id AND i.namespace = h.namespace AND i.key = h.key
)

-- name: langgraph_store_get
-- One live item of the tenant, its TTL refreshed with :refresh.
WITH hits AS (
    SELECT * FROM langgraph_store_items i
     WHERE i.tenant_id = :tenant_id AND i.namespace = CAST(:namespace AS text[]) AND i.key = :key
       AND (i.expires_at IS NULL OR i.expires_at > now())
), ${part:langgraph_store_refresh}
SELECT namespace, key, value, created_at, updated_at FROM hits;

-- name: langgraph_store_put
-- Store or replace an item; :ttl_minutes null keeps it until deleted. An expired item put
-- again is a new one (its created_at is now). A graph's put is fenced by its run's lease, as
-- its checkpoints are (held is false and nothing is written once it is lost); :run_id null is
-- a put of the API or of the store on its own.
WITH ${part:langgraph_lease},
put AS (
    INSERT INTO langgraph_store_items AS i (tenant_id, namespace, key, value, ttl_minutes, expires_at)
    SELECT :tenant_id, CAST(:namespace AS text[]), :key, CAST(:value AS jsonb),
           CAST(:ttl_minutes AS float8), now() + make_interval(secs => CAST(:ttl_minutes AS float8) * 60)
     WHERE CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE
       SET value = excluded.value, ttl_minutes = excluded.ttl_minutes, expires_at = excluded.expires_at,
           updated_at = now(),
           created_at = CASE WHEN i.expires_at <= now() THEN now() ELSE i.created_at END
    RETURNING 1
)
SELECT CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease) AS held,
       (SELECT count(*) FROM put) AS written;

-- name: langgraph_store_delete
-- Delete an item of the tenant (nothing when there is none), fenced as a put is.
WITH ${part:langgraph_lease},
gone AS (
    DELETE FROM langgraph_store_items
     WHERE tenant_id = :tenant_id AND namespace = CAST(:namespace AS text[]) AND key = :key
       AND (CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease))
    RETURNING 1
)
SELECT CAST(:run_id AS uuid) IS NULL OR EXISTS (SELECT 1 FROM lease) AS held,
       (SELECT count(*) FROM gone) AS deleted;

-- name: langgraph_store_search
-- One page of the tenant's live items under a namespace prefix, newest change first, whose
-- value meets every condition of :conditions ([{key, op, value}], op eq | ne | gt | gte | lt
-- | lte; eq on an object is containment, as LangGraph's filters match nested objects); their
-- TTLs refreshed with :refresh.
WITH hits AS (
    SELECT * FROM langgraph_store_items i
     WHERE i.tenant_id = :tenant_id AND (i.expires_at IS NULL OR i.expires_at > now())
       AND ${part:langgraph_store_matches}
       AND NOT EXISTS (
           SELECT 1 FROM jsonb_to_recordset(CAST(:conditions AS jsonb)) AS c(key text, op text, value jsonb)
            WHERE (CASE c.op
                       WHEN 'eq' THEN i.value -> c.key = c.value
                                      OR (jsonb_typeof(c.value) = 'object' AND i.value -> c.key @> c.value)
                       WHEN 'ne' THEN i.value -> c.key IS DISTINCT FROM c.value
                       WHEN 'gt' THEN i.value -> c.key > c.value
                       WHEN 'gte' THEN i.value -> c.key >= c.value
                       WHEN 'lt' THEN i.value -> c.key < c.value
                       WHEN 'lte' THEN i.value -> c.key <= c.value
                   END) IS NOT TRUE)
     ORDER BY i.updated_at DESC, i.namespace, i.key
     LIMIT :limit OFFSET :offset
), ${part:langgraph_store_refresh}
SELECT namespace, key, value, created_at, updated_at FROM hits
 ORDER BY updated_at DESC, namespace, key;

-- name: langgraph_store_namespaces
-- One page of the distinct namespaces of the tenant's live items matching :prefix and
-- :suffix, cut to :max_depth labels (null: whole), in order.
SELECT DISTINCT n.namespace FROM (
    SELECT CASE WHEN CAST(:max_depth AS int) IS NULL THEN i.namespace
                ELSE i.namespace[1:CAST(:max_depth AS int)] END AS namespace
      FROM langgraph_store_items i
     WHERE i.tenant_id = :tenant_id AND (i.expires_at IS NULL OR i.expires_at > now())
       AND ${part:langgraph_store_matches}
) n
 ORDER BY n.namespace
 LIMIT :limit OFFSET :offset;

-- name: langgraph_store_sweep
-- Reaper pass: delete up to :batch expired items (reads have not seen them since they expired).
DELETE FROM langgraph_store_items
 WHERE ctid IN (SELECT ctid FROM langgraph_store_items
                 WHERE expires_at <= now() ORDER BY expires_at LIMIT :batch)
RETURNING 1;
