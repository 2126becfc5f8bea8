"""Key the partial index of leased runs on the run id.

Fenced writes look a run up by ``id`` and ``status = 'leased'``; keyed on ``tenant_id`` the
planner walked every leased row for each of them (400 rows read per write with 400 runs
leased). Keyed on ``id`` it is a direct lookup, and ``INCLUDE (tenant_id)`` still serves the
in-flight counts per tenant from the index alone. No key names ``locked_until``, so
heartbeats stay HOT updates.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_agent_runs_leased", table_name="agent_runs")
    op.execute("CREATE INDEX ix_agent_runs_leased ON agent_runs (id) INCLUDE (tenant_id) WHERE status = 'leased'")


def downgrade() -> None:
    op.drop_index("ix_agent_runs_leased", table_name="agent_runs")
    op.execute("CREATE INDEX ix_agent_runs_leased ON agent_runs (tenant_id) WHERE status = 'leased'")
