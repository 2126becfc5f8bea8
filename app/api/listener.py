"""One LISTEN connection per API process, fanned out in memory to the streams following a run.

NOTIFY only wakes a stream; the stream then reads the table, which is the truth. Each
subscriber's wakeup is a single flag (a queue bounded at one), so a slow stream never holds
up the others or grows memory: however many notifications it missed, one read catches it up.
NOTIFY is not durable and the connection can drop, so streams also poll, and after every
(re)connect all streams are woken once to cover what was missed while deaf.

Streams of one run that are caught up sit at the same cursor, so the hub also shares their
reads: one query per run and cursor, however many streams of this process follow the run.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress

import asyncpg

from app.domain import Event
from app.queue import EVENTS_CHANNEL

Reader = Callable[[uuid.UUID, int], Coroutine[None, None, list[Event]]]

log = logging.getLogger(__name__)


class EventHub:
    """Wakes the subscribers of a run when ``runq_events`` says it has new events."""

    def __init__(
        self,
        dsn: str,
        *,
        probe_s: float = 5.0,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 5.0,
    ) -> None:
        self._dsn = dsn
        self._probe_s = probe_s
        self._backoff = (backoff_min_s, backoff_max_s)
        self._subscribers: dict[str, set[asyncio.Event]] = {}
        self._reads: dict[tuple[uuid.UUID, int], asyncio.Task[list[Event]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="runq-event-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextmanager
    def subscribe(self, run_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """A wakeup flag set whenever the run may have new events; the holder clears it."""
        wake = asyncio.Event()
        key = str(run_id)
        self._subscribers.setdefault(key, set()).add(wake)
        try:
            yield wake
        finally:
            waiting = self._subscribers.get(key)
            if waiting is not None:
                waiting.discard(wake)
                if not waiting:
                    del self._subscribers[key]

    async def read(self, run_id: uuid.UUID, after: int, reader: Reader) -> list[Event]:
        """``reader(run_id, after)``, shared by every stream that asks for the same page at once.

        The read runs in a task of its own, so a stream that goes away mid-read does not cancel
        it for the others.
        """
        key = (run_id, after)
        task = self._reads.get(key)
        if task is None:
            task = asyncio.create_task(reader(run_id, after))
            self._reads[key] = task
            task.add_done_callback(lambda _: self._reads.pop(key, None))
        return await asyncio.shield(task)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for wake in self._subscribers.get(payload.partition(":")[0], ()):
            wake.set()

    def _wake_all(self) -> None:
        for waiting in self._subscribers.values():
            for wake in waiting:
                wake.set()

    async def _listen_forever(self) -> None:
        delay = self._backoff[0]
        while True:
            try:
                await self._listen_once()
                delay = self._backoff[0]
            except Exception as exc:  # whatever broke the connection, this loop must live on
                log.warning("LISTEN connection failed (%r); retrying in %.1fs", exc, delay)
            self.connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _listen_once(self) -> None:
        """Listen until the connection dies; a probe notices a silently dead socket."""
        conn = await asyncpg.connect(
            self._dsn, timeout=10, server_settings={"application_name": "runq-api-listen"}
        )
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        try:
            await conn.add_listener(EVENTS_CHANNEL, self._on_notify)
            self.connected.set()
            self._wake_all()
            while not lost.is_set():
                with suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), timeout=self._probe_s)
                if not lost.is_set():
                    await conn.fetchval("SELECT 1", timeout=self._probe_s)
        finally:
            conn.terminate()
