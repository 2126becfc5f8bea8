"""The worker's writes for all its runs, each fenced by its run's own lease.

Alone, each write is a transaction with its own commit (and WAL flush); a hundred runs
streaming tokens would make commits grow with runs and tokens. So every write goes through a
:class:`Batcher`: the items of many runs go out together in one statement, and a run missing
from the statement's result lost its lease (that run alone: the others commit).

Endings (:meth:`Queue.finish_many`) go out at once, after one turn of the event loop, so a
lone ending is not delayed and endings that arrive while one statement is out share the next.
Event appends (:meth:`Queue.append_events_many`) go out on a tick: every ``EVENTS_INTERVAL_S``
one statement takes what all the runs buffered by then, whatever their number, so commits per
second grow with worker processes, not with runs or tokens. A write someone waits for (a
checkpoint, a step's record) or an event a follower waits for (anything but a token) is
*urgent*: it goes out at once, with whatever every other run buffered meanwhile (group commit),
unless ``max_in_flight`` statements are out, and then with the next one to leave when one of
them comes back: never after a fixed wait. A run has one write out at a time (its
:class:`~app.worker.events.EventBuffer` sees to it): while its statement is out, its new deltas
are coalesced and ride the next one. A run's background writes are handed over with a callback
(:meth:`Batcher.submit`), with no task or future of their own.

**One run's fault stays its own.** Every value an item carries is JSON text already, encoded
by its run's attempt before the item joins a batch (``app/worker/attempt.py``), so a value that
cannot be stored fails that run alone, there. Should PostgreSQL refuse a statement all the same,
:meth:`Batcher._send` splits it until the run at fault is alone: every other run is written as
if it had been alone, and that run's write fails with :class:`InvalidData` (a value PostgreSQL
refused) or with the error itself. Only an unreachable database fails every run of a statement.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from app import tracing
from app.db.errors import refused_data, server_message
from app.domain import Finished
from app.errors import DatabaseUnavailable, InvalidData, LeaseLost
from app.queue import Appended, Ended, Queue, Stored

# Endings per statement: a worker of 128 slots drained no-op runs 6 % faster ending up to 128 at
# once than up to 64, and no faster with more (docs/benchmarks.md).
MAX_BATCH = 128
EVENTS_INTERVAL_S = 0.05
EVENTS_FAILED_INTERVAL_S = 0.25
# Two event statements out at once: a run's tokens wait for the next tick, not for the
# statement of the other runs still waiting for its commit (WAL flush) to come back.
EVENTS_IN_FLIGHT = 2

log = logging.getLogger(__name__)


class _Item(Protocol):
    @property
    def run_id(self) -> uuid.UUID: ...


ItemT = TypeVar("ItemT", bound=_Item)
ResultT = TypeVar("ResultT")
Done = Callable[[Any], None]


class Batcher(Generic[ItemT, ResultT]):
    """Items of many runs written together by ``write_many``; a run missing from its result
    lost its lease, and its caller gets :class:`LeaseLost` (nothing was written for it).

    A caller hands over ``take``, called when the statement is built, not when the caller
    arrives: whatever its run buffered until then rides along. A caller cancelled before
    that is left out, and its ``take`` is never called; a ``take`` that raises fails its own
    caller only. A statement starts at most every ``interval_s`` (at once for an urgent item),
    with up to ``max_in_flight`` of them out at once; when that many are out, the next waits
    for one to come back.
    """

    def __init__(
        self,
        write_many: Callable[[Sequence[ItemT]], Awaitable[Mapping[uuid.UUID, ResultT]]],
        *,
        name: str,
        interval_s: float = 0.0,
        failed_interval_s: float = 0.0,
        max_in_flight: int = 1,
        max_batch: int | None = MAX_BATCH,
    ) -> None:
        self._write_many = write_many
        self._name = name
        self._interval_s = interval_s
        self._failed_interval_s = max(failed_interval_s, interval_s)
        self._max_in_flight = max_in_flight
        self._max_batch = max_batch
        self._pending: list[tuple[Callable[[], ItemT | None], Done]] = []
        self._urgent = False  # an item of _pending may not wait for the tick
        self._ticking: asyncio.Future[None] | None = None  # the tick's wait, ended early by an urgent item
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._next_at = float("-inf")  # the tick
        self._calm_until = float("-inf")  # after a failed statement

    async def write(self, take: Callable[[], ItemT], *, urgent: bool = False) -> ResultT:
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self.submit(lambda: None if future.done() else take(), partial(_settle, future), urgent=urgent)
        return await future

    def submit(
        self,
        take: Callable[[], ItemT | None],
        done: Callable[[ResultT | BaseException], None],
        *,
        urgent: bool = False,
    ) -> None:
        """:meth:`write` without waiting: ``done`` gets the run's result, or the exception that
        stands for it (:class:`LeaseLost` included). ``take`` returning ``None`` leaves the caller
        out of the statement, and ``done`` is not called."""
        self._pending.append((take, done))
        if urgent:
            self.hurry()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=self._name)

    def hurry(self) -> None:
        """What is pending goes at once, not at the tick: someone waits for it (an urgent item,
        or a write that must wait for a run's earlier one to be stored first)."""
        self._urgent = True
        if self._ticking is not None and not self._ticking.done():
            self._ticking.set_result(None)

    async def _drain(self) -> None:
        tracing.detach()  # started by one run's write, it writes for all of them
        loop = asyncio.get_running_loop()
        while True:
            await self._tick(loop)
            while len(self._in_flight) >= self._max_in_flight:
                await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
            if not self._pending:
                return
            cut = len(self._pending) if self._max_batch is None else self._max_batch
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            self._urgent = False
            items: list[tuple[ItemT, Done]] = []
            for take, done in batch:
                try:
                    item = take()
                except Exception as exc:  # e.g. a value its run cannot store: that run's alone
                    done(exc)
                    continue
                if item is not None:  # None: e.g. its caller was cancelled while it waited
                    items.append((item, done))
            if not items:
                continue
            self._next_at = loop.time() + self._interval_s
            if self._max_in_flight == 1:
                await self._send(items)
            else:
                task = asyncio.create_task(self._send(items), name=self._name)
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)

    async def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until the next statement may start: at least one turn of the loop (items added in
        this same turn join the batch), at most until the tick, at once for an urgent item;
        after a failed statement, not before the database had some air, urgent or not."""
        while True:
            now = loop.time()
            until = self._calm_until if self._urgent else max(self._next_at, self._calm_until)
            if until <= now:
                await asyncio.sleep(0)
                return
            self._ticking = loop.create_future()
            timer = loop.call_later(until - now, _settle, self._ticking, None)
            try:
                await self._ticking
            finally:
                timer.cancel()
                self._ticking = None

    async def _send(self, items: list[tuple[ItemT, Done]]) -> None:
        try:
            written = await self._write_many([item for item, _ in items])
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable) or len(items) == 1:
                self._failed(items, exc)
                return
            # PostgreSQL refused something of one run (we cannot tell which from here): each
            # half again, until the run at fault is alone and the others are written
            log.warning("%s: a statement of %d runs refused, written in halves: %s", self._name, len(items),
                        server_message(exc))
            half = len(items) // 2
            await self._send(items[:half])
            await self._send(items[half:])
            return
        for item, done in items:
            result = written.get(item.run_id)
            done(LeaseLost(str(item.run_id)) if result is None else result)

    def _failed(self, items: list[tuple[ItemT, Done]], exc: Exception) -> None:
        """Each caller handles it as it would from its own statement."""
        if isinstance(exc, DatabaseUnavailable):  # one line per statement, not one per run
            log.warning("%s: %d runs not written: %s", self._name, len(items), exc)
            # give a struggling database air before the next statement
            self._calm_until = asyncio.get_running_loop().time() + self._failed_interval_s
        elif refused_data(exc):
            exc = InvalidData(f"PostgreSQL refused the run's data: {server_message(exc)}")
        else:
            log.error("%s: the write of run %s failed", self._name, items[0][0].run_id, exc_info=exc)
        for _, done in items:
            done(exc)


class Writer:
    """Where an attempt's writes go: one object per worker, shared by all its runs. Each run
    builds its own items (its values encoded, app/worker/attempt.py); the writer batches them."""

    def __init__(self, queue: Queue) -> None:
        self._endings: Batcher[Ended, Finished] = Batcher(queue.finish_many, name="runq-endings")
        # One item per run at a time (a run's writes are serialised by its event buffer), so a
        # worker's runs all fit in one statement.
        self._appends: Batcher[Appended, Stored] = Batcher(
            queue.append_events_many,
            name="runq-events",
            interval_s=EVENTS_INTERVAL_S,
            failed_interval_s=EVENTS_FAILED_INTERVAL_S,
            max_in_flight=EVENTS_IN_FLIGHT,
            max_batch=None,
        )

    async def append(self, take: Callable[[], Appended]) -> Stored:
        """A write the attempt waits for (a checkpoint, a step's record, with the run's buffered
        events): urgent. :class:`LeaseLost` if the claim is no longer ours."""
        return await self._appends.write(take, urgent=True)

    async def finish(self, take: Callable[[], Ended]) -> Finished:
        """End the attempt (batched with the other runs' endings); :class:`LeaseLost` if the
        claim is no longer ours."""
        return await self._endings.write(take)

    def append_in_background(
        self, take: Callable[[], Appended | None], done: Callable[[Stored | BaseException], None], *, urgent: bool
    ) -> None:
        """:meth:`append` of buffered events alone, without waiting: ``done`` gets what was
        stored or the exception in its place; ``take`` returning ``None`` leaves the run out."""
        self._appends.submit(take, done, urgent=urgent)

    def hurry(self) -> None:
        """The event statement that is waiting for its tick goes now: a run's write waits for
        its earlier background write to be stored (a step's record waits for its tokens)."""
        self._appends.hurry()


def _settle(future: asyncio.Future[Any], outcome: Any) -> None:
    """A waiting caller's outcome, unless it was cancelled meanwhile."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
