"""Which streams this process has open, kept fresh in ``run_subscribers`` for every API process.

The reaper cancels an interactive run only when no subscriber row of it was seen within the
presence TTL, so each process re-stamps all its open streams well inside that TTL; a process
that dies simply stops stamping and its rows age out.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import suppress

from app.domain import DatabaseUnavailable
from app.queue import Queue

log = logging.getLogger(__name__)


class Presence:
    """The open SSE subscribers of this process and the loop that refreshes them."""

    def __init__(self, queue: Queue, *, refresh_s: float) -> None:
        self._queue = queue
        self._refresh_s = refresh_s
        self._open: set[uuid.UUID] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_forever(), name="runq-presence")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def attach(self, run_id: uuid.UUID) -> uuid.UUID:
        subscriber_id = uuid.uuid4()
        await self._queue.attach_subscriber(run_id=run_id, subscriber_id=subscriber_id)
        self._open.add(subscriber_id)
        return subscriber_id

    async def detach(self, run_id: uuid.UUID, subscriber_id: uuid.UUID) -> None:
        self._open.discard(subscriber_id)
        await self._queue.detach_subscriber(run_id=run_id, subscriber_id=subscriber_id)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self._queue.touch_subscribers(sorted(self._open))
            except DatabaseUnavailable as exc:
                log.warning("could not refresh stream presence: %s", exc)
