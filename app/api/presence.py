"""Which streams this process has open, kept fresh in ``run_subscribers`` for every API process.

The reaper cancels an interactive run only when no subscriber row of it was seen within the
presence TTL, so each process re-stamps all its open streams well inside that TTL; a process
that dies simply stops stamping and its rows age out. Streams that close together (a run
ends with a hundred viewers) leave in one statement.

Each open event stream of any kind also holds a tenant's stream slot (``stream_slots``,
docs/limits.md), kept alive the same way, so a tenant's ``max_streams`` counts every API
process's streams and a dead process's stop counting within the TTL.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.background import BackgroundLoop
from app.errors import DatabaseUnavailable
from app.queue import Queue

log = logging.getLogger(__name__)


class Presence:
    """The open SSE subscribers of this process and the loop that refreshes them."""

    def __init__(self, queue: Queue, *, refresh_s: float) -> None:
        self._queue = queue
        self._refresh_s = refresh_s
        self._open: set[uuid.UUID] = set()
        self._leaving: set[tuple[uuid.UUID, uuid.UUID]] = set()
        self._slots: set[uuid.UUID] = set()
        self._freed: set[uuid.UUID] = set()
        self._loop = BackgroundLoop(self._refresh_forever, name="runq-presence")
        self._detacher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
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
        self._start_detacher()

    async def stream_slot(self, tenant_id: str) -> StreamSlot:
        """Take one of the tenant's stream slots before opening an event stream, or raise
        :class:`~app.errors.LimitExceeded` (a ``429 too_many_streams``) at its ``max_streams``.

        Every route that answers with an event stream (SSE, ``/ai-sdk``, ``/ag-ui``) does::

            slot = await runtime.presence.stream_slot(principal.tenant_id)
            return slot.serving(StreamingResponse(...))

        and the slot is given back when that response ends, however it ends.
        """
        slot_id = await self._queue.take_stream_slot(tenant_id)
        self._slots.add(slot_id)
        return StreamSlot(slot_id, self._release_slot)

    async def streaming(self, tenant_id: str, respond: Callable[[], Awaitable[Response]]) -> Response:
        """Take a stream slot, then build the response with ``respond`` (which may create a run):
        the slot is given back when the response ends, or at once if building it fails, so a
        refused stream creates nothing and a failed request holds no slot."""
        slot = await self.stream_slot(tenant_id)
        try:
            response = await respond()
        except BaseException:
            slot.release()
            raise
        return slot.serving(response)

    def _release_slot(self, slot_id: uuid.UUID) -> None:
        if slot_id in self._slots:
            self._slots.discard(slot_id)
            self._freed.add(slot_id)
            self._start_detacher()

    def _start_detacher(self) -> None:
        if self._detacher is None or self._detacher.done():
            self._detacher = asyncio.create_task(self._detach_leaving(), name="runq-presence-detach")

    async def _detach_leaving(self) -> None:
        await asyncio.sleep(0)  # streams closing in this same turn of the loop join the batch
        while self._leaving or self._freed:
            leaving, self._leaving = list(self._leaving), set()
            freed, self._freed = list(self._freed), set()
            try:
                await self._queue.detach_subscribers(leaving)
                await self._queue.release_stream_slots(freed)
            except DatabaseUnavailable as exc:  # the rows age out after the presence TTL
                log.warning("could not detach %d closed streams: %s", len(leaving) + len(freed), exc)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self._queue.touch_subscribers(sorted(self._open))
                await self._queue.touch_stream_slots(sorted(self._slots))
            except DatabaseUnavailable as exc:
                log.warning("could not refresh stream presence: %s", exc)
            except Exception:  # the refresher is every stream's: it goes on
                log.exception("could not refresh stream presence")


class StreamSlot:
    """One open stream's place under its tenant's ``max_streams``, until :meth:`serving`'s
    response ends."""

    def __init__(self, slot_id: uuid.UUID, release: Callable[[uuid.UUID], None]) -> None:
        self.id = slot_id
        self._release = release

    def release(self) -> None:
        self._release(self.id)

    def serving(self, response: Response) -> Response:
        """``response``, giving the slot back when it has been sent, or the client left."""
        return _HoldingSlot(response, self)


class _HoldingSlot(Response):
    """Sends the wrapped response, then releases the slot (also when cancelled midway)."""

    def __init__(self, inner: Response, slot: StreamSlot) -> None:  # no super(): nothing of its own to render
        self.inner = inner
        self.slot = slot
        self.status_code = inner.status_code
        self.background = inner.background
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.slot.release()
