"""A tenant's share of an API process's database connections for creating runs (docs/limits.md).

Every create's commit in PostgreSQL waits its turn behind the others that notify (a NOTIFY's
commit holds a cluster-wide lock through its WAL flush), and a rate-limited tenant's creates
also take turns on its bucket's row. A tenant that sends many creates at once would have them
queue inside the database, each holding one of the process's connections, while another
tenant's create waits for a connection and then behind them all. Here a tenant's creates wait
in the process instead, at most ``share`` of them in the database at once: they cost the tenant
nothing it would not wait for anyway, and another tenant's create passes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy.pool import Pool

# A tenant's share of a pool's connections for creates; at least one.
POOL_SHARE = 0.25


@dataclass(slots=True)
class _Tenant:
    gate: asyncio.Semaphore
    users: int = field(default=0)


class CreateTurns:
    """Per tenant, at most ``share`` creates in the database at once from this process."""

    def __init__(self, share: int) -> None:
        self.share = max(1, share)
        self._tenants: dict[str, _Tenant] = {}

    @classmethod
    def of_pool(cls, pool: Pool) -> CreateTurns:
        """A quarter of ``pool``'s connections (a pool without a size: one)."""
        size = getattr(pool, "size", None)
        return cls(int(size() * POOL_SHARE) if callable(size) else 1)

    def __len__(self) -> int:
        return len(self._tenants)

    @asynccontextmanager
    async def turn(self, tenant_id: str) -> AsyncIterator[None]:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = _Tenant(asyncio.Semaphore(self.share))
        tenant.users += 1
        try:
            async with tenant.gate:
                yield
        finally:
            tenant.users -= 1
            if tenant.users == 0:  # a tenant that creates nothing now holds no memory here
                del self._tenants[tenant_id]
