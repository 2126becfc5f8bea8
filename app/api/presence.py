"""Which streams this process has open, kept fresh in ``run_subscribers`` for every API process.

The reaper cancels an interactive run only when no subscriber row of it was seen within the
presence TTL, so each process re-stamps all its open streams well inside that TTL; a process
that dies simply stops stamping and its rows age out. Streams that close together (a run
ends with a hundred viewers) leave in one statement.
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
        self._leaving: set[tuple[uuid.UUID, uuid.UUID]] = set()
        self._task: asyncio.Task[None] | None = None
        self._detacher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_forever(), name="runq-presence")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._detacher is not None:
            await self._detacher

    async def attach(self, run_id: uuid.UUID) -> uuid.UUID:
        subscriber_id = uuid.uuid4()
        await self._queue.attach_subscriber(run_id=run_id, subscriber_id=subscriber_id)
        self._open.add(subscriber_id)
        return subscriber_id

    def detach(self, run_id: uuid.UUID, subscriber_id: uuid.UUID) -> None:
        """Forget a closed stream at once; its row goes in the next batch of detaches, in a
        task of its own (the stream's task is usually being cancelled)."""
        self._open.discard(subscriber_id)
        self._leaving.add((run_id, subscriber_id))
        if self._detacher is None or self._detacher.done():
            self._detacher = asyncio.create_task(self._detach_leaving(), name="runq-presence-detach")

    async def _detach_leaving(self) -> None:
        await asyncio.sleep(0)  # streams closing in this same turn of the loop join the batch
        while self._leaving:
            leaving, self._leaving = list(self._leaving), set()
            try:
                await self._queue.detach_subscribers(leaving)
            except DatabaseUnavailable as exc:  # the rows age out after the presence TTL
                log.warning("could not detach %d closed streams: %s", len(leaving), exc)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self._queue.touch_subscribers(sorted(self._open))
            except DatabaseUnavailable as exc:
                log.warning("could not refresh stream presence: %s", exc)
