-- The webhook outbox and the tenants' signing secrets. Outbox rows are inserted by the
-- agent_runs trigger of migration 0019, in the statement of the event they announce; these
-- statements take them, settle them, list them and send them again.

-- name: claim_deliveries
-- Due deliveries for one sender: attempts + 1 (the fence of its result) and next_attempt_at
-- pushed one lease ahead, so a sender that dies leaves them due again, same webhook-id.
WITH due AS (
    SELECT id FROM webhook_deliveries
     WHERE status = 'pending' AND next_attempt_at <= now()
     ORDER BY next_attempt_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE webhook_deliveries d
       SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => :lease_s)
      FROM due
     WHERE d.id = due.id
    RETURNING d.*
)
SELECT taken.*, e.data AS event_data, e.attempt AS event_attempt, e.created_at AS event_created_at
  FROM taken
  JOIN agent_runs r ON r.id = taken.run_id  -- its history_at names the event's partition
  JOIN run_events e ON e.run_id = taken.run_id AND e.history_at = r.history_at AND e.seq = taken.event_seq;

-- name: settle_delivery
-- One attempt's outcome, fenced by its attempt number: delivered, stopped (410), or a retry
-- after :delay_s while the delivery is younger than :retry_for_s, else failed.
UPDATE webhook_deliveries
   SET status = CASE WHEN :outcome <> 'retry' THEN :outcome
                     WHEN now() + make_interval(secs => :delay_s)
                          <= retry_from + make_interval(secs => :retry_for_s) THEN 'pending'
                     ELSE 'failed' END,
       next_attempt_at = now() + make_interval(secs => :delay_s),
       delivered_at = CASE WHEN :outcome = 'delivered' THEN now() END,
       last_status_code = :status_code, last_error = :error
 WHERE id = :id AND attempts = :attempt AND status = 'pending'
RETURNING status, delivered_at;

-- name: list_deliveries
-- Deliveries newest first, one page after the cursor; by tenant, status and run when given.
SELECT * FROM webhook_deliveries
 WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
   AND (CAST(:status AS text) IS NULL OR status = :status)
   AND (CAST(:run_id AS uuid) IS NULL OR run_id = :run_id)
   ${part:page_after_cursor};

-- name: redeliver
-- Admin: a settled delivery (failed, stopped or delivered) due again now, with a fresh retry
-- window and the same webhook-id; senders woken.
WITH t AS (
    UPDATE webhook_deliveries
       SET status = 'pending', next_attempt_at = now(), retry_from = now(), delivered_at = NULL
     WHERE id = :id AND status <> 'pending'
    RETURNING *
)
SELECT t.*, pg_notify('${webhooks_channel}', '') FROM t;

-- name: get_delivery
-- One delivery (admin), to tell a missing one from one still pending.
SELECT * FROM webhook_deliveries WHERE id = :id;

-- name: oldest_undelivered_age
-- Metrics: how long the oldest pending delivery has waited, and how many are pending.
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS age_s, count(*) AS pending
  FROM webhook_deliveries WHERE status = 'pending';

-- name: get_webhook_secrets
-- The tenant's sealed secret, and the previous one while it still signs after a rotation.
SELECT secret, CASE WHEN previous_until > now() THEN previous END AS previous
  FROM webhook_secrets WHERE tenant_id = :tenant_id;

-- name: create_webhook_secret
-- The tenant's first secret; no row when a concurrent request created one first.
INSERT INTO webhook_secrets (tenant_id, secret) VALUES (:tenant_id, :secret)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING secret;

-- name: rotate_webhook_secret
-- A new secret; the old one keeps signing (a second signature) for :overlap_s.
INSERT INTO webhook_secrets (tenant_id, secret) VALUES (:tenant_id, :secret)
ON CONFLICT (tenant_id) DO UPDATE
   SET previous = webhook_secrets.secret,
       previous_until = now() + make_interval(secs => :overlap_s),
       secret = EXCLUDED.secret, rotated_at = now()
RETURNING secret;
