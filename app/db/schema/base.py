"""The metadata all tables join, its naming convention, and the SQL fragments several share."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Index, MetaData, Table, text

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

NOW = text("now()")
STATUSES = "'pending', 'leased', 'waiting', 'done', 'dead', 'cancelled'"
# Non-terminal, as threads count it (a run in flight holds its thread's turn).
NON_TERMINAL = "status NOT IN ('done', 'dead', 'cancelled')"


def newest_first_index(name: str, table: Table, *leading: Column[Any], where: str | None = None) -> Index:
    """The index of a newest-first list page: ``leading`` narrows, then the keyset cursor's order;
    ``where`` leaves rows out (a partial index: the list reads those apart)."""
    predicate = text(where) if where else None
    return Index(name, *leading, table.c.created_at.desc(), table.c.id.desc(), postgresql_where=predicate)


def unique_per_tenant(name: str, table: Table, column: Column[Any]) -> Index:
    """A tenant's own name for a row (an idempotency key, a chat id): optional, and where it is
    given, one row per tenant has it (the insert's ``ON CONFLICT`` names this index)."""
    return Index(name, table.c.tenant_id, column, unique=True, postgresql_where=text(f"{column.name} IS NOT NULL"))
