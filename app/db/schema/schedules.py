"""Schedules (docs/schedules.md): what they create and when."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from app.db.schema.base import NOW, metadata, newest_first_index

schedules = Table(
    "schedules",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("cron", Text),
    Column("every_s", Float),
    Column("timezone", Text, nullable=False, server_default="UTC"),
    Column("agent", Text, nullable=False),
    Column("input_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("budget_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("thread_id", UUID(as_uuid=True)),
    Column("webhook", JSONB),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("next_run_at", DateTime(timezone=True), nullable=False),
    Column("ends_at", DateTime(timezone=True)),  # no slot after it fires (null: none)
    Column("last_run_id", UUID(as_uuid=True)),
    # why the reaper could not fire it, and when; cleared when it fires again
    Column("error", Text),
    Column("error_at", DateTime(timezone=True)),
    # left alone until then though due: parked after an error, or its slot refused by the
    # tenant's create limits until their Retry-After
    Column("not_before", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("(cron IS NULL) <> (every_s IS NULL)", name="cron_or_every"),
    CheckConstraint("every_s IS NULL OR every_s >= 1", name="every_s"),
)
# when the reaper looks at a schedule next: its slot, or later while it is held back
Index(
    "ix_schedules_due",
    func.greatest(schedules.c.next_run_at, schedules.c.not_before),
    postgresql_where=text("NOT paused"),
)
newest_first_index("ix_schedules_tenant_created", schedules, schedules.c.tenant_id)
