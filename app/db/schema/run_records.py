"""What a run records as it goes: events (partitioned by day), checkpoint, effects, waits, subscribers."""

from __future__ import annotations

import re

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from app.db.schema.base import NOW, metadata
from app.db.schema.runs import run_id_column

# Partitioned by RANGE (history_at), one partition per UTC day (app/queue/partitions.py), plus a
# default one so that an insert never fails. The primary key must hold the partition key;
# history_at is a function of run_id (every insert copies the run row's, and the triggers of
# migration 0018 move the events when it changes), so (run_id, seq, history_at) is unique
# exactly when (run_id, seq) is. No foreign key: its check locked the run row for each event.
run_events = Table(
    "run_events",
    metadata,
    Column("run_id", UUID(as_uuid=True), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("data", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("history_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "seq", "history_at"),
    postgresql_partition_by="RANGE (history_at)",
)
# The partitions of run_events, which the metadata does not list (Alembic leaves them alone).
EVENT_PARTITION = re.compile(r"^run_events_(default|before_\d{8}|\d{8})$")

run_checkpoints = Table(
    "run_checkpoints",
    metadata,
    run_id_column(primary_key=True),
    Column("state", JSONB, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("event_seq", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)

run_effects = Table(
    "run_effects",
    metadata,
    run_id_column(nullable=False),
    Column("key", Text, nullable=False),
    Column("result", JSONB),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("run_id", "key"),
)

# A run's waits, per name and occurrence (the n-th wait of that name in the run's code), as the
# effect ledger records effects: a resumed attempt's same ctx.wait_for finds its value here.
waitpoints = Table(
    "waitpoints",
    metadata,
    Column("waitpoint_id", UUID(as_uuid=True), primary_key=True),
    run_id_column(nullable=False),
    Column("name", Text, nullable=False),
    Column("occurrence", Integer, nullable=False),
    Column("payload", JSONB),
    Column("expires_at", DateTime(timezone=True)),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("resumed_at", DateTime(timezone=True)),  # by a value or by its time-out
    Column("value", JSONB),
    Column("timed_out", Boolean, nullable=False, server_default=text("false")),
    Column("cancelled_at", DateTime(timezone=True)),  # the run was cancelled while waiting
    UniqueConstraint("run_id", "name", "occurrence"),
)
# The reaper's time-outs read only open waits.
Index(
    "ix_waitpoints_expires_at",
    waitpoints.c.expires_at,
    postgresql_where=text("resumed_at IS NULL AND cancelled_at IS NULL AND expires_at IS NOT NULL"),
)

run_subscribers = Table(
    "run_subscribers",
    metadata,
    run_id_column(nullable=False),
    Column("subscriber_id", UUID(as_uuid=True), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("run_id", "subscriber_id"),
)
