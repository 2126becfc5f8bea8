"""The tables, as SQLAlchemy metadata: Alembic's target and the reference for the migrations.

One module per concern; importing the package registers every table on ``metadata``.
"""

from __future__ import annotations

# Imported for the tables they register on the metadata.
from app.db.schema import (  # noqa: F401
    fleet,
    langgraph,
    limits,
    run_records,
    runs,
    schedules,
    tenants,
    threads,
    webhooks,
)
from app.db.schema.base import metadata
from app.db.schema.run_records import EVENT_PARTITION

__all__ = ["EVENT_PARTITION", "metadata"]
