"""Usage on the run, per-tenant hourly usage, queue samples, and the run's trace parent.

``agent_runs.usage`` holds what a run consumed over all its attempts (tokens, model calls, tool
calls), added to by the worker's fenced statements. ``tenant_usage_hourly`` is the same additions
per tenant and hour, written by those same statements, so "tokens per tenant in the last 24 h" is a
read of at most 25 rows per tenant instead of a sum over runs. ``queue_samples`` is one row per
minute written by the reaper pass (queue depth and runs finished that minute) for the operators'
charts. ``traceparent`` is the W3C trace context of the request that created the run.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agent_runs",
        sa.Column("usage", JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
    )
    op.add_column("agent_runs", sa.Column("traceparent", sa.Text()))
    op.create_table(
        "tenant_usage_hourly",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("model_calls", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("tool_calls", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("tenant_id", "hour", name="pk_tenant_usage_hourly"),
    )
    op.create_table(
        "queue_samples",
        sa.Column("at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("leased", sa.Integer(), nullable=False),
        sa.Column("finished", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queue_samples")
    op.drop_table("tenant_usage_hourly")
    op.drop_column("agent_runs", "traceparent")
    op.drop_column("agent_runs", "usage")
