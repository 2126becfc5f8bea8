"""LangGraph's checkpoints and pending writes, as runq's fenced saver stores them, and its store's items."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from app.db.schema.base import NOW, metadata


def _checkpoint_key() -> list[Column[str]]:
    """How LangGraph names a checkpoint (``checkpoint_ns`` empty for the root graph)."""
    return [
        Column("thread_id", Text, nullable=False),
        Column("checkpoint_ns", Text, nullable=False, server_default=""),
        Column("checkpoint_id", Text, nullable=False),
    ]


# LangGraph's checkpoints (app/agents/langgraph/saver.py), one row per checkpoint, whole: the
# serialized checkpoint in LangGraph's own typed encoding, its metadata as jsonb for list
# filters. ``run_id`` is the runq run whose lease fenced the write (null for the saver used on
# its own); no foreign key, so the saver also serves graphs run outside runq. Keyed as
# LangGraph keys them; checkpoint ids are time-ordered (uuid6), so newest first is id order.
langgraph_checkpoints = Table(
    "langgraph_checkpoints",
    metadata,
    *_checkpoint_key(),
    Column("parent_checkpoint_id", Text),
    Column("type", Text, nullable=False),
    Column("checkpoint", LargeBinary, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("run_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id"),
)

# The pending writes of a checkpoint's tasks (what a retried step does not redo).
langgraph_checkpoint_writes = Table(
    "langgraph_checkpoint_writes",
    metadata,
    *_checkpoint_key(),
    Column("task_id", Text, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("task_path", Text, nullable=False, server_default=""),
    Column("channel", Text, nullable=False),
    Column("type", Text),
    Column("blob", LargeBinary),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
)

# LangGraph's store (§17): a tenant's items, keyed as LangGraph keys them (a namespace path
# and a key), so a prefix search is an array slice compare on the primary key's index.
# ``ttl_minutes`` is kept beside ``expires_at`` so a read can refresh the item's TTL; an expired
# item is invisible at once and deleted by the reaper pass (app/queue/maintenance.py).
langgraph_store_items = Table(
    "langgraph_store_items",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("namespace", ARRAY(Text), nullable=False),
    Column("key", Text, nullable=False),
    Column("value", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("ttl_minutes", Float),
    Column("expires_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("tenant_id", "namespace", "key"),
    Index("ix_langgraph_store_items_expires_at", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
)

# LangGraph's assistants of one's own (§17): one row per version of each of a tenant's
# assistants; ``current`` marks the version ``GET`` serves (``/latest`` moves it), so a patch and
# a rollback are each one statement and the versions list is a plain read.
langgraph_assistants = Table(
    "langgraph_assistants",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("assistant_id", UUID(as_uuid=True), nullable=False),
    Column("version", Integer, nullable=False),
    Column("current", Boolean, nullable=False),
    Column("graph_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text),
    Column("config", JSONB, nullable=False),
    Column("context", JSONB, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("tenant_id", "assistant_id", "version"),
    Index("ix_langgraph_assistants_current", "tenant_id", "assistant_id", unique=True, postgresql_where=text("current")),
)
