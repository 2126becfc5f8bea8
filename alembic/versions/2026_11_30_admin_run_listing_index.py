"""Index runs of every tenant newest first, for the admin list and the operator UI.

Without it `GET /admin/runs` (no tenant filter) sorts the whole history on each page. Both
columns are written once at insert, so heartbeats and transitions stay HOT updates.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_agent_runs_created ON agent_runs (created_at DESC, id DESC)")


def downgrade() -> None:
    op.drop_index("ix_agent_runs_created", table_name="agent_runs")
