"""The ``openai`` agent's shared HTTP connections to a model provider.

One pooled ``httpx.AsyncClient`` per worker process, event loop and base URL, so runs reuse
connections. No cap of its own (httpx's default of 100 silently queued a worker's 101st
stream); ``RUNQ_OPENAI_MAX_CONNECTIONS`` sets one, and a turn that waits for it is logged and
counted (``runq_model_pool_wait_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from app.metrics import MODEL_POOL_WAIT


class TransientModelError(Exception):
    """A model error worth retrying inside the run (connection, 429, 5xx)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0)
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _ModelConnections]] = (
    weakref.WeakKeyDictionary()
)

log = logging.getLogger(__name__)


class _ModelConnections:
    """The pooled client for one base URL and, when capped, the slots a model turn waits for."""

    def __init__(self, base_url: str, limit: int | None) -> None:
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        self.client = httpx.AsyncClient(base_url=base_url, timeout=_TIMEOUT, limits=limits)
        self.limit = limit
        self.waiting = 0  # turns queued for a slot right now
        # In front of httpx's own pool (of the same size), which then never has to queue: a
        # wait here is seen, timed and bounded.
        self._slots = asyncio.Semaphore(limit) if limit else None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._slots is None:
            yield self.client
            return
        if self._slots.locked():
            await self._wait_for_slot(self._slots)
        else:
            await self._slots.acquire()
        try:
            yield self.client
        finally:
            self._slots.release()

    async def _wait_for_slot(self, slots: asyncio.Semaphore) -> None:
        started = time.monotonic()
        self.waiting += 1
        try:
            async with asyncio.timeout(_TIMEOUT.pool):
                await slots.acquire()
        except TimeoutError:
            raise TransientModelError(
                f"no model connection free within {_TIMEOUT.pool:.0f} s"
                f" (RUNQ_OPENAI_MAX_CONNECTIONS={self.limit})"
            ) from None
        finally:
            self.waiting -= 1
            waited = time.monotonic() - started
            MODEL_POOL_WAIT.observe(waited)
        log.warning(
            "waited %.0f ms for a model connection (RUNQ_OPENAI_MAX_CONNECTIONS=%d in use)",
            waited * 1000,
            self.limit,
        )


def model_connections(base_url: str, limit: int | None) -> _ModelConnections:
    """The process's connections to ``base_url`` on the running loop (a client is bound to its loop)."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(base_url)
    if found is None or found.client.is_closed:
        found = per_loop[base_url] = _ModelConnections(base_url, limit)
    return found


async def close_shared_clients() -> None:
    """Close the running loop's shared clients (worker shutdown, test teardown)."""
    for found in _clients.pop(asyncio.get_running_loop(), {}).values():
        await found.client.aclose()
