"""Webhooks (an outbox filled by a trigger, per-tenant signing secrets) and schedules.

The outbox row is written by an AFTER INSERT trigger on ``run_events``, so it commits with the
event it announces on every path that writes one (a worker's completion, the reaper, the API's
cancel) without any of those statements knowing about webhooks. The trigger's WHEN clause keeps
it off every other event (deltas, tool calls): only the four announceable types call it.

Revision ID: 0006
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0003"
branch_labels = None
depends_on = None

# Frozen here on purpose: app/queue/channels.py names the same channel for the listeners.
OUTBOX_FUNCTION = """
CREATE FUNCTION runq_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (run_id, tenant_id, url, event_seq, event_type)
    SELECT r.id, r.tenant_id, r.webhook ->> 'url', NEW.seq, NEW.type
      FROM agent_runs r
     WHERE r.id = NEW.run_id AND r.webhook -> 'events' ? NEW.type
    ON CONFLICT (run_id, event_seq) DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('runq_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""
OUTBOX_TRIGGER = """
CREATE TRIGGER run_events_webhook_outbox AFTER INSERT ON run_events FOR EACH ROW
  WHEN (NEW.type IN ('run.completed', 'run.failed', 'run.cancelled', 'run.waiting'))
  EXECUTE FUNCTION runq_webhook_outbox()
"""


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("webhook", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column("agent_runs", sa.Column("schedule_id", sa.UUID(), nullable=True))
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("retry_from", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed', 'stopped')", name=op.f("ck_webhook_deliveries_status")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_webhook_deliveries_run_id_agent_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("run_id", "event_seq", name=op.f("uq_webhook_deliveries_run_id_event_seq")),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_webhook_deliveries_status_created",
        "webhook_deliveries",
        ["status", sa.literal_column("created_at DESC"), sa.literal_column("id DESC")],
    )
    op.create_table(
        "webhook_secrets",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous", sa.Text(), nullable=True),
        sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_webhook_secrets")),
    )
    op.create_table(
        "schedules",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=True),
        sa.Column("every_s", sa.Float(), nullable=True),
        sa.Column("timezone", sa.Text(), server_default="UTC", nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("input_json", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("budget_json", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.UUID(), nullable=True),
        sa.Column("webhook", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_id", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("(cron IS NULL) <> (every_s IS NULL)", name=op.f("ck_schedules_cron_or_every")),
        sa.CheckConstraint("every_s IS NULL OR every_s >= 1", name=op.f("ck_schedules_every_s")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
    )
    op.create_index("ix_schedules_due", "schedules", ["next_run_at"], postgresql_where=sa.text("NOT paused"))
    op.create_index(
        "ix_schedules_tenant_created",
        "schedules",
        ["tenant_id", sa.literal_column("created_at DESC"), sa.literal_column("id DESC")],
    )
    op.execute(OUTBOX_FUNCTION)
    op.execute(OUTBOX_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER run_events_webhook_outbox ON run_events")
    op.execute("DROP FUNCTION runq_webhook_outbox()")
    op.drop_index("ix_schedules_tenant_created", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")
    op.drop_table("webhook_secrets")
    op.drop_index("ix_webhook_deliveries_status_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_column("agent_runs", "schedule_id")
    op.drop_column("agent_runs", "webhook")
