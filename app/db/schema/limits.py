"""Tenant limits (docs/limits.md): each tenant's overrides with its create token bucket, and
the event streams open right now, one row each, kept alive by the API process serving it."""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Column, DateTime, Float, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import UUID

from app.db.schema.base import NOW, metadata

# A null limit is the process default (RUNQ_TENANT_*), 0 is no limit. The row is also the lock
# that serialises one limited tenant's admissions, so two API processes count one figure.
tenant_buckets = Table(
    "tenant_buckets",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("create_per_s", Float),
    Column("create_burst", Integer),
    Column("max_pending", Integer),
    Column("max_streams", Integer),
    Column("max_schedules", Integer),
    # the create bucket: tokens left at refilled_at (null: full)
    Column("tokens", Float, nullable=False, server_default="0"),
    Column("refilled_at", DateTime(timezone=True)),
    # runs pending or waiting as last counted, plus the creates admitted since (runq_admit_create)
    Column("pending_seen", Integer),
    Column("pending_counted_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("create_per_s >= 0", name="create_per_s"),
    CheckConstraint("create_burst >= 0", name="create_burst"),
    CheckConstraint("max_pending >= 0", name="max_pending"),
    CheckConstraint("max_streams >= 0", name="max_streams"),
    CheckConstraint("max_schedules >= 0", name="max_schedules"),
)

# One row per open stream; its process pushes expires_at forward while the stream lasts, so a
# stream of a process that died stops counting once expires_at passes.
stream_slots = Table(
    "stream_slots",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
Index("ix_stream_slots_tenant_id", stream_slots.c.tenant_id)
