"""LangGraph's assistants of one's own (§17).

- ``langgraph_assistants``: one row per version of each of a tenant's assistants; ``current``
  marks the version served (at most one per assistant, by a partial unique index).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "langgraph_assistants",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("assistant_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("current", sa.Boolean(), nullable=False),
        sa.Column("graph_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("config", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("context", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "assistant_id", "version", name=op.f("pk_langgraph_assistants")),
    )
    op.create_index(
        "ix_langgraph_assistants_current",
        "langgraph_assistants",
        ["tenant_id", "assistant_id"],
        unique=True,
        postgresql_where=sa.text("current"),
    )


def downgrade() -> None:
    op.drop_table("langgraph_assistants")
