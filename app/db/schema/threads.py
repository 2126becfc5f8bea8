"""Conversations (docs/threads.md): the thread and its message history."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from app.db.schema.base import NOW, metadata, newest_first_index, unique_per_tenant

# A conversation (docs/threads.md): its runs execute one at a time in creation order
# (``run_count`` hands out their turns) and read and extend ``thread_messages``.
threads = Table(
    "threads",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("idempotency_key", Text),
    Column("request_hash", Text),
    Column("chat_id", Text),  # a chat frontend's own name for the conversation, unique per tenant
    Column("run_count", BigInteger, nullable=False, server_default="0"),
    Column("message_count", Integer, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)
newest_first_index("ix_threads_tenant_created", threads, threads.c.tenant_id)
unique_per_tenant("uq_threads_idempotency", threads, threads.c.idempotency_key)
unique_per_tenant("uq_threads_chat_id", threads, threads.c.chat_id)

# The history, ``idx`` from 0 without gaps. ``run_id`` (the run that added a message) has no
# foreign key: retention purges old runs, the conversation stays.
thread_messages = Table(
    "thread_messages",
    metadata,
    Column(
        "thread_id",
        UUID(as_uuid=True),
        ForeignKey("threads.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("idx", Integer, nullable=False),
    Column("role", Text, nullable=False),
    Column("message", JSONB, nullable=False),  # {role, content, tool_calls?, tool_call_id?}
    Column("run_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("thread_id", "idx"),
)
