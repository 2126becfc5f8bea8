"""A thread's ``chat_id``: the name a chat frontend gives a conversation (docs/threads.md).

A frontend such as the AI SDK's ``useChat`` makes up its own chat ids; the first message with a
new one creates the tenant's thread of that name, and every later one finds it again. Unique
per tenant, and only where set (threads created without one have none).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("threads", sa.Column("chat_id", sa.Text(), nullable=True))
    op.create_index(
        "uq_threads_chat_id",
        "threads",
        ["tenant_id", "chat_id"],
        unique=True,
        postgresql_where=sa.text("chat_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_threads_chat_id", table_name="threads")
    op.drop_column("threads", "chat_id")
