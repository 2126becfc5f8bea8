"""The metadata all tables join, its naming convention, and the SQL fragments several share."""

from __future__ import annotations

from sqlalchemy import MetaData, text

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
