"""What every part of the queue shares: its settings and its connections."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.autocommit import one_statement
from app.db.errors import translated


class Store:
    """The queue's configuration and connections; each concern's statements build on it."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        lease_s: float = 30.0,
        retry_base_s: float = 5.0,
        retry_max_s: float = 300.0,
        priority_aging_s: float = 60.0,
        tenant_max_inflight: int = 0,
        presence_ttl_s: float = 15.0,
    ) -> None:
        self.engine = engine
        self.lease_s = lease_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.aging_s = priority_aging_s
        self.tenant_max_inflight = tenant_max_inflight
        self.presence_ttl_s = presence_ttl_s
        self._limits_checked_at = float("-inf")
        self._has_limits = False

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; an unreachable database surfaces as :class:`DatabaseUnavailable`."""
        with translated():
            async with self.engine.begin() as conn:
                yield conn

    @asynccontextmanager
    async def _statement(self) -> AsyncIterator[AsyncConnection]:
        """For one statement in autocommit, without BEGIN/COMMIT round trips on the hot paths.

        A statement is atomic on its own: a transition's CTEs (status, events, checkpoint,
        NOTIFY) commit together, and a read sees one snapshot. Behind a transaction-mode
        pooler it runs in a transaction all the same (see ``PoolerPool``).
        """
        with translated():
            async with one_statement(self.engine) as conn:
                yield conn

    def _idle_bound(self) -> dict[str, str]:
        """``:ms`` for bound_idle_transaction: one lease of idleness."""
        return {"ms": str(max(int(self.lease_s * 1000), 1))}
