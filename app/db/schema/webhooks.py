"""The webhook outbox and the tenants' signing secrets (docs/webhooks.md)."""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import UUID

from app.db.schema.base import NOW, metadata, newest_first_index
from app.db.schema.runs import run_id_column

# The webhook outbox: one row per (run, event) a run's webhook asked for, written by a trigger on
# agent_runs in the statement that adds the event (docs/webhooks.md). ``id`` is the stable
# ``webhook-id``; ``next_attempt_at`` doubles as the delivery's lease (pushed past the request's
# timeout when a worker takes it), and ``attempts`` fences the taker's result.
DELIVERY_STATUSES = "'pending', 'delivered', 'failed', 'stopped'"
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    run_id_column(nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("event_seq", Integer, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # Retries stop once this is RUNQ_WEBHOOK_RETRY_FOR_S old; a redelivery starts it again.
    Column("retry_from", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_status_code", Integer),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("delivered_at", DateTime(timezone=True)),
    CheckConstraint(f"status IN ({DELIVERY_STATUSES})", name="status"),
    UniqueConstraint("run_id", "event_seq"),
)
Index(
    "ix_webhook_deliveries_due",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=text("status = 'pending'"),
)
newest_first_index("ix_webhook_deliveries_status_created", webhook_deliveries, webhook_deliveries.c.status)

# One signing secret per tenant, encrypted with a key derived from RUNQ_SECRET_KEY (app/signing.py).
# After a rotation the previous one still signs until ``previous_until``.
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("secret", Text, nullable=False),
    Column("previous", Text),
    Column("previous_until", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("rotated_at", DateTime(timezone=True)),
)
