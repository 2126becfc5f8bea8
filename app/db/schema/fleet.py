"""The worker fleet's registry and the queue's per-minute samples."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    Table,
    Text,
)

from app.db.schema.base import NOW, metadata

# One row per worker process, upserted by its heartbeat (with the lease renewal), deleted on a
# clean exit and by the reaper once stale; no foreign key from ``agent_runs.locked_by``, since a
# dead worker's leases outlive its row until the reaper returns them.
workers = Table(
    "workers",
    metadata,
    Column("worker_id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("version", Text, nullable=False),
    Column("slots", Integer, nullable=False),
    Column("slots_in_use", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_beat_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # the worker's own LISTEN channel: runq_wake_workers() wakes it alone (migration 0012)
    Column("wake_channel", Text),
)

# One row a minute from the reaper pass: the queue's depth then and the runs finished in that
# minute, for the operators' charts of the last hour.
queue_samples = Table(
    "queue_samples",
    metadata,
    Column("at", DateTime(timezone=True), primary_key=True),
    Column("pending", Integer, nullable=False),
    Column("leased", Integer, nullable=False),
    Column("finished", Integer, nullable=False),
)
