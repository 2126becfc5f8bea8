"""What every part of the queue shares: its settings and its connections."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.backoff import RetryBackoff
from app.db.autocommit import one_statement
from app.db.errors import translated
from app.queue.refusals import Refusals
from app.queue.turns import CreateTurns


@dataclass(frozen=True, slots=True)
class LimitDefaults:
    """``RUNQ_TENANT_*``: the limits of a tenant without an override (0 = none; docs/limits.md)."""

    create_per_s: float = 0.0
    create_burst: int | None = None  # None: twice create_per_s
    max_pending: int = 0
    max_streams: int = 0
    max_inflight: int = 0
    max_schedules: int = 100

    def burst(self, create_per_s: float, create_burst: int | None) -> int:
        """The bucket's size for a rate and a burst override, as ``runq_admit_create`` takes it."""
        if create_per_s <= 0:
            return 0
        chosen = create_burst or self.create_burst or -(-2 * create_per_s // 1)
        return max(1, int(chosen))


class Store:
    """The queue's configuration and connections; each concern's statements build on it."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        claim_engine: AsyncEngine | None = None,
        lease_s: float = 30.0,
        retry: RetryBackoff | None = None,
        priority_aging_s: float = 60.0,
        tenant_max_inflight: int = 0,
        presence_ttl_s: float = 15.0,
        limits: LimitDefaults | None = None,
    ) -> None:
        self.engine = engine
        self.claim_engine = claim_engine or engine  # a worker's claims (app.db.engine.worker_engines)
        self.lease_s = lease_s
        self.retry = retry or RetryBackoff()
        self.aging_s = priority_aging_s
        self.tenant_max_inflight = tenant_max_inflight
        self.presence_ttl_s = presence_ttl_s
        self.limits = limits or LimitDefaults(max_inflight=tenant_max_inflight)
        self.refusals = Refusals()
        self.create_turns = CreateTurns.of_pool(engine.pool)
        self._limits_checked_at = float("-inf")
        self._has_limits = False

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; an unreachable database surfaces as :class:`DatabaseUnavailable`."""
        with translated():
            async with self.engine.begin() as conn:
                yield conn

    @asynccontextmanager
    async def _statement(self, engine: AsyncEngine | None = None) -> AsyncIterator[AsyncConnection]:
        """For one statement in autocommit, without BEGIN/COMMIT round trips on the hot paths.

        A statement is atomic on its own: a transition's CTEs (status, events, checkpoint,
        NOTIFY) commit together, and a read sees one snapshot. Behind a transaction-mode
        pooler it runs in a transaction all the same (see ``PoolerPool``).
        """
        with translated():
            async with one_statement(engine or self.engine) as conn:
                yield conn

    def _idle_bound(self) -> dict[str, str]:
        """``:ms`` for bound_idle_transaction: one lease of idleness."""
        return {"ms": str(max(int(self.lease_s * 1000), 1))}
