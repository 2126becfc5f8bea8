"""Threads: conversations that runs read and extend, one run of a thread at a time.

``agent_runs.thread_turn`` numbers a thread's runs in creation order (handed out under the
thread's row lock); the claim skips a run while a run of its thread with a smaller turn is not
terminal, looked up through a partial index that holds only the non-terminal runs of threads,
so the check never reads history. ``thread_messages.run_id`` has no foreign key on purpose:
retention purges a thread's old runs, and the conversation they wrote stays.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NON_TERMINAL = "status NOT IN ('done', 'dead', 'cancelled')"


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("request_hash", sa.Text(), nullable=True),
        sa.Column("run_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("message_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_threads")),
    )
    op.create_index(
        "ix_threads_tenant_created",
        "threads",
        ["tenant_id", sa.text("created_at DESC"), sa.text("id DESC")],
    )
    op.create_index(
        "uq_threads_idempotency",
        "threads",
        ["tenant_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_table(
        "thread_messages",
        sa.Column("thread_id", sa.UUID(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("message", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["threads.id"], name=op.f("fk_thread_messages_thread_id_threads"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("thread_id", "idx", name=op.f("pk_thread_messages")),
    )
    op.add_column("agent_runs", sa.Column("thread_id", sa.UUID(), nullable=True))
    op.add_column("agent_runs", sa.Column("thread_turn", sa.BigInteger(), nullable=True))
    op.create_foreign_key(
        op.f("fk_agent_runs_thread_id_threads"), "agent_runs", "threads", ["thread_id"], ["id"], ondelete="CASCADE"
    )
    op.create_index(
        "ix_agent_runs_thread_turn",
        "agent_runs",
        ["thread_id", "thread_turn"],
        postgresql_where=sa.text("thread_id IS NOT NULL"),
    )
    op.create_index(
        "ix_agent_runs_thread_inflight",
        "agent_runs",
        ["thread_id", "thread_turn"],
        postgresql_where=sa.text(f"thread_id IS NOT NULL AND {NON_TERMINAL}"),
    )


def downgrade() -> None:
    op.drop_index("ix_agent_runs_thread_inflight", table_name="agent_runs")
    op.drop_index("ix_agent_runs_thread_turn", table_name="agent_runs")
    op.drop_constraint(op.f("fk_agent_runs_thread_id_threads"), "agent_runs", type_="foreignkey")
    op.drop_column("agent_runs", "thread_turn")
    op.drop_column("agent_runs", "thread_id")
    op.drop_table("thread_messages")
    op.drop_index("uq_threads_idempotency", table_name="threads")
    op.drop_index("ix_threads_tenant_created", table_name="threads")
    op.drop_table("threads")
