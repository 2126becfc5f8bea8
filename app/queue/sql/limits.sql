-- Tenant limits (docs/limits.md): overrides, open streams, and each tenant's use for operators.
-- The create check itself rides the enqueue statement (runs.sql, runq_admit_create).

-- name: take_stream_slot
-- A new open stream of the tenant; null when taken, else the max_streams the tenant is at.
SELECT runq_take_stream_slot(:id, :tenant_id, :max_streams, :ttl_s) AS at_cap;

-- name: touch_stream_slots
-- This process's streams are still open; slots of processes that died (their expiry long past)
-- are dropped in passing.
WITH gone AS (
    DELETE FROM stream_slots WHERE expires_at < now() - interval '1 minute'
)
UPDATE stream_slots SET expires_at = now() + make_interval(secs => :ttl_s)
 WHERE id = ANY(CAST(:ids AS uuid[]));

-- name: release_stream_slots
-- Streams closed: they stop counting at once.
DELETE FROM stream_slots WHERE id = ANY(CAST(:ids AS uuid[]));

-- name: set_tenant_limits
-- Set the limits a PUT names (null: back to the default, 0: no limit); the others stay.
INSERT INTO tenant_buckets (tenant_id, create_per_s, create_burst, max_pending, max_streams, max_schedules)
VALUES (:tenant_id, :create_per_s, :create_burst, :max_pending, :max_streams, :max_schedules)
ON CONFLICT (tenant_id) DO UPDATE
   SET create_per_s = CASE WHEN :set_create_per_s THEN excluded.create_per_s ELSE tenant_buckets.create_per_s END,
       create_burst = CASE WHEN :set_create_burst THEN excluded.create_burst ELSE tenant_buckets.create_burst END,
       max_pending = CASE WHEN :set_max_pending THEN excluded.max_pending ELSE tenant_buckets.max_pending END,
       max_streams = CASE WHEN :set_max_streams THEN excluded.max_streams ELSE tenant_buckets.max_streams END,
       max_schedules = CASE WHEN :set_max_schedules THEN excluded.max_schedules ELSE tenant_buckets.max_schedules END,
       updated_at = now();

-- name: clear_tenant_limit
-- The tenant's in-flight cap back to the default.
DELETE FROM tenant_limits WHERE tenant_id = :tenant_id;

-- name: tenant_use
-- Tenants by name after the cursor (or the one named), with their overrides and current use:
-- every tenant with a key, an override, or runs queued.
WITH names AS (
    SELECT CAST(:tenant_id AS text) AS tenant_id WHERE CAST(:tenant_id AS text) IS NOT NULL
    UNION
    SELECT tenant_id FROM api_keys WHERE revoked_at IS NULL AND CAST(:tenant_id AS text) IS NULL
    UNION
    SELECT tenant_id FROM tenant_buckets WHERE CAST(:tenant_id AS text) IS NULL
    UNION
    SELECT tenant_id FROM tenant_limits WHERE CAST(:tenant_id AS text) IS NULL
), page AS (
    SELECT tenant_id FROM names
     WHERE CAST(:after AS text) IS NULL OR tenant_id > :after
     ORDER BY tenant_id
     LIMIT :limit
)
SELECT p.tenant_id, b.create_per_s, b.create_burst, b.max_pending, b.max_streams, b.max_schedules,
       b.tokens, extract(epoch FROM now() - b.refilled_at)::float8 AS refilled_s_ago,
       tl.max_inflight,
       (SELECT count(*) FROM agent_runs r
         WHERE r.tenant_id = p.tenant_id AND r.status IN ('pending', 'waiting')) AS pending,
       (SELECT count(*) FROM agent_runs r
         WHERE r.tenant_id = p.tenant_id AND r.status = 'leased') AS inflight,
       (SELECT count(*) FROM stream_slots s
         WHERE s.tenant_id = p.tenant_id AND s.expires_at > now()) AS streams,
       (SELECT count(*) FROM schedules s WHERE s.tenant_id = p.tenant_id) AS schedules
  FROM page p
  LEFT JOIN tenant_buckets b ON b.tenant_id = p.tenant_id
  LEFT JOIN tenant_limits tl ON tl.tenant_id = p.tenant_id
 ORDER BY p.tenant_id;
