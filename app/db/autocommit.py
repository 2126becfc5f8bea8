"""One statement on its own connection: in autocommit where it may, in a transaction where not.

Autocommit saves the BEGIN/COMMIT round trips on the hot paths. Behind a transaction-mode
pooler (an engine whose pool is ``app.db.engine.PoolerPool``) a statement's prepare and its
execution are two round trips that only a transaction keeps on one server connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


@asynccontextmanager
async def one_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for one statement, committed by itself."""
    if getattr(engine.pool, "autocommit", True):
        async with engine.connect() as conn:
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")
    else:
        async with engine.begin() as conn:
            yield conn
