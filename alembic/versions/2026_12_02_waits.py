"""Waiting for input: status ``waiting``, the waitpoints of a run, and what waits leave on the run.

A waiting run holds no lease, so neither the claim (``status = 'pending'``) nor the lease
reaper (``status = 'leased'``) sees it through their partial indexes. The reaper finds
expired waits through the open waitpoints' own partial index. ``agent_runs.waitpoint`` is the
open waitpoint as run JSON shows it (null otherwise), ``agent_runs.wait_count`` the claims that
ended in a wait: ``attempts - wait_count`` is what ``max_attempts`` counts.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OLD_STATUSES = "'pending', 'leased', 'done', 'dead', 'cancelled'"
NEW_STATUSES = "'pending', 'leased', 'waiting', 'done', 'dead', 'cancelled'"


def _statuses(statuses: str, interactive: str) -> None:
    op.drop_constraint(op.f("ck_agent_runs_status"), "agent_runs", type_="check")
    op.create_check_constraint("status", "agent_runs", f"status IN ({statuses})")
    op.drop_index("ix_agent_runs_interactive", table_name="agent_runs")
    op.create_index(
        "ix_agent_runs_interactive",
        "agent_runs",
        ["created_at"],
        postgresql_where=sa.text(f"on_disconnect = 'cancel' AND status IN ({interactive})"),
    )


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("waitpoint", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column("agent_runs", sa.Column("wait_count", sa.Integer(), server_default="0", nullable=False))
    _statuses(NEW_STATUSES, "'pending', 'leased', 'waiting'")
    # runq_queue_depth{status="waiting"} on every scrape, without reading history
    op.create_index("ix_agent_runs_waiting", "agent_runs", ["updated_at"], postgresql_where=sa.text("status = 'waiting'"))
    op.create_table(
        "waitpoints",
        sa.Column("waitpoint_id", sa.UUID(), primary_key=True),
        sa.Column("run_id", sa.UUID(), sa.ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("timed_out", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("run_id", "name", "occurrence", name="uq_waitpoints_run_id_name_occurrence"),
    )
    op.create_index(
        "ix_waitpoints_expires_at",
        "waitpoints",
        ["expires_at"],
        postgresql_where=sa.text("resumed_at IS NULL AND cancelled_at IS NULL AND expires_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("waitpoints")
    op.drop_index("ix_agent_runs_waiting", table_name="agent_runs")
    op.execute(
        "UPDATE agent_runs SET status = 'cancelled', cancel_reason = 'user', finished_at = now()"
        " WHERE status = 'waiting'"
    )
    _statuses(OLD_STATUSES, "'pending', 'leased'")
    op.drop_column("agent_runs", "wait_count")
    op.drop_column("agent_runs", "waitpoint")
