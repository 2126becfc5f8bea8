"""LangGraph's store and crons' ends (§17).

- ``langgraph_store_items`` (app/agents/langgraph/store.py): a tenant's items by namespace and
  key. ``namespace`` is a text array, so a namespace prefix is a slice of the primary key; TTLs as
  ``ttl_minutes`` (to refresh on read) and ``expires_at`` (what reads and the reaper go by).
- ``schedules.ends_at``: no slot after it fires (a LangGraph cron's ``end_time``); null: none.

Revision ID: 0027
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0027"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "langgraph_store_items",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("namespace", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("ttl_minutes", sa.Float(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "namespace", "key", name=op.f("pk_langgraph_store_items")),
    )
    op.create_index(
        "ix_langgraph_store_items_expires_at",
        "langgraph_store_items",
        ["expires_at"],
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.add_column("schedules", sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("schedules", "ends_at")
    op.drop_table("langgraph_store_items")
