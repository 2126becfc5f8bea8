-- LangGraph's assistants of one's own (app/queue/graph_assistants.py, for the
-- /langgraph/assistants routes): one row per version; the row with current serves the assistant.

-- name: langgraph_assistant_create
-- Version 1 of a new assistant of the tenant; no row when the id is taken (the route answers
-- 409 or the existing one, as its if_exists asks).
INSERT INTO langgraph_assistants AS a
       (tenant_id, assistant_id, version, current, graph_id, name, description, config, context, metadata)
SELECT :tenant_id, :assistant_id, 1, true, :graph_id, :name, :description,
       CAST(:config AS jsonb), CAST(:context AS jsonb), CAST(:metadata AS jsonb)
 WHERE NOT EXISTS (SELECT 1 FROM langgraph_assistants o
                    WHERE o.tenant_id = :tenant_id AND o.assistant_id = :assistant_id)
ON CONFLICT DO NOTHING
RETURNING a.*, a.created_at AS updated_at;

-- name: langgraph_assistant_get
-- The assistant's current version; created_at is its first version's, updated_at this one's.
SELECT a.*, a.created_at AS updated_at,
       (SELECT min(f.created_at) FROM langgraph_assistants f
         WHERE f.tenant_id = a.tenant_id AND f.assistant_id = a.assistant_id) AS first_at
  FROM langgraph_assistants a
 WHERE a.tenant_id = :tenant_id AND a.assistant_id = :assistant_id AND a.current;

-- name: langgraph_assistant_search
-- The tenant's assistants (current versions) of :graph_id (null: any), whose metadata contains
-- :metadata and whose name contains :name in any case (null: any); the most recently changed first.
SELECT a.*, a.created_at AS updated_at,
       (SELECT min(f.created_at) FROM langgraph_assistants f
         WHERE f.tenant_id = a.tenant_id AND f.assistant_id = a.assistant_id) AS first_at
  FROM langgraph_assistants a
 WHERE a.tenant_id = :tenant_id AND a.current
   AND (CAST(:graph_id AS text) IS NULL OR a.graph_id = CAST(:graph_id AS text))
   AND (CAST(:name AS text) IS NULL OR strpos(lower(a.name), lower(CAST(:name AS text))) > 0)
   AND a.metadata @> CAST(:metadata AS jsonb)
 ORDER BY a.created_at DESC, a.assistant_id;

-- name: langgraph_assistant_patch
-- A new version, made current (the highest number so far plus one): the fields given (null keeps the current one's), metadata merged
-- into the current one's. No row for an unknown assistant.
WITH was AS (
    SELECT * FROM langgraph_assistants
     WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id AND current
       FOR UPDATE
), last AS (
    SELECT max(version) AS version FROM langgraph_assistants
     WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id
), retired AS (
    UPDATE langgraph_assistants a SET current = false
      FROM was WHERE a.tenant_id = was.tenant_id AND a.assistant_id = was.assistant_id AND a.current
    RETURNING 1
)
INSERT INTO langgraph_assistants AS a
       (tenant_id, assistant_id, version, current, graph_id, name, description, config, context, metadata)
SELECT was.tenant_id, was.assistant_id, last.version + 1, true,
       coalesce(CAST(:graph_id AS text), was.graph_id), coalesce(CAST(:name AS text), was.name),
       coalesce(CAST(:description AS text), was.description),
       coalesce(CAST(:config AS jsonb), was.config), coalesce(CAST(:context AS jsonb), was.context),
       was.metadata || coalesce(CAST(:metadata AS jsonb), '{}')
  FROM was, last
 WHERE (SELECT count(*) FROM retired) = 1  -- retired first: one current version at a time
RETURNING a.*, a.created_at AS updated_at,
          (SELECT min(f.created_at) FROM langgraph_assistants f
            WHERE f.tenant_id = a.tenant_id AND f.assistant_id = a.assistant_id) AS first_at;

-- name: langgraph_assistant_versions
-- The assistant's versions whose metadata contains :metadata, newest first.
SELECT a.*, a.created_at AS updated_at FROM langgraph_assistants a
 WHERE a.tenant_id = :tenant_id AND a.assistant_id = :assistant_id
   AND a.metadata @> CAST(:metadata AS jsonb)
 ORDER BY a.version DESC
 LIMIT :limit OFFSET :offset;

-- name: langgraph_assistant_set_latest
-- Make :version the current one; true when that version exists (otherwise nothing changes).
WITH target AS (
    SELECT 1 FROM langgraph_assistants
     WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id AND version = :version
), retired AS (
    UPDATE langgraph_assistants SET current = false
     WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id AND current AND version <> :version
       AND EXISTS (SELECT 1 FROM target)
    RETURNING 1
)
UPDATE langgraph_assistants SET current = true
 WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id AND version = :version
   AND (SELECT count(*) FROM retired) >= 0  -- retired first: one current version at a time
RETURNING version;

-- name: langgraph_assistant_delete
-- Every version of the assistant; the number deleted (0: unknown).
WITH gone AS (
    DELETE FROM langgraph_assistants WHERE tenant_id = :tenant_id AND assistant_id = :assistant_id
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
