"""One LISTEN connection per API process, fanned out in memory to the streams following a run.

NOTIFY only wakes a stream; the stream then reads the table, which is the truth. Each
subscriber's wakeup is a single flag (a queue bounded at one), so a slow stream never holds
up the others or grows memory: however many notifications it missed, one read catches it up.
NOTIFY is not durable and the connection can drop, so streams also poll, and after every
(re)connect all streams are woken once to cover what was missed while deaf.

The hub also does the streams' reads. Streams of one run that are caught up sit at the same
cursor and share one result; and every (run, cursor) asked for while a read is out goes into
the next one, a single statement for all of them. One notification burst across a hundred
runs is then one query, not a hundred (nor a thousand, one per stream).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from app.api.background import BackgroundLoop
from app.backoff import Backoff
from app.db.listen import listen_forever
from app.queue import channels

P = TypeVar("P")
Cursor = tuple[uuid.UUID, int]  # (run_id, last seq the reader has)
BatchReader = Callable[[Sequence[Cursor]], Awaitable[Sequence[P]]]

MAX_BATCH = 200

log = logging.getLogger(__name__)


class EventHub(Generic[P]):
    """Wakes the subscribers of a run when ``runq_events`` says it has new events, and reads
    for them through ``read_batch`` (one result per cursor, in order)."""

    def __init__(
        self,
        dsn: str,
        read_batch: BatchReader[P],
        *,
        probe_s: float = 5.0,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 2.0,
    ) -> None:
        self._dsn = dsn
        self._probe_s = probe_s
        self._backoff = (backoff_min_s, backoff_max_s)
        self._subscribers: dict[str, set[asyncio.Event]] = {}
        self._read_batch = read_batch
        self._asked: dict[Cursor, asyncio.Future[P]] = {}  # for the next read
        self._reader: asyncio.Task[None] | None = None
        self._loop = BackgroundLoop(self._listen_forever, name="runq-event-hub")
        self.connected = asyncio.Event()

    async def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

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

    async def read(self, run_id: uuid.UUID, after: int) -> P:
        """What ``read_batch`` returns for ``(run_id, after)``, read after this call began.

        A read already out may have taken its snapshot before the event that woke the caller
        committed, so the caller joins the next read, never one in flight. Reads run in a task
        of their own: a stream that goes away does not cancel one for the others.
        """
        key = (run_id, after)
        future = self._asked.get(key)
        if future is None:
            future = self._asked[key] = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieve)  # its streams may all have gone meanwhile
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_asked(), name="runq-event-reads")
        return await asyncio.shield(future)

    async def _read_asked(self) -> None:
        await asyncio.sleep(0)  # streams woken by the same notifications join this read
        while self._asked:
            keys = list(self._asked)[:MAX_BATCH]
            futures = [self._asked.pop(key) for key in keys]
            try:
                results = await self._read_batch(keys)
            except asyncio.CancelledError:  # the hub stops: so do the reads it owes
                for future in [*futures, *self._asked.values()]:
                    future.cancel()
                raise
            except Exception as exc:  # each stream handles it as it would its own read's
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for future, result in zip(futures, results, strict=True):
                if not future.done():
                    future.set_result(result)

    def _on_notify(self, payload: str) -> None:
        for written in payload.split(","):  # "<run_id>:<last_seq>", one per run the statement wrote
            for wake in self._subscribers.get(written.partition(":")[0], ()):
                wake.set()

    def _wake_all(self) -> None:
        for waiting in self._subscribers.values():
            for wake in waiting:
                wake.set()

    async def _listen_forever(self) -> None:
        await listen_forever(
            self._dsn,
            {channels.EVENTS: self._on_notify},
            application_name="runq-api-listen",
            on_connect=self._connected,
            on_disconnect=self.connected.clear,
            probe_s=self._probe_s,
            backoff=Backoff(first_s=self._backoff[0], max_s=self._backoff[1]),
        )

    def _connected(self) -> None:
        self.connected.set()
        self._wake_all()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
