"""The worker's writes for all its runs, each fenced by its run's own lease.

Alone, each write is a transaction with its own commit (and WAL flush); a hundred runs
streaming tokens would make commits grow with runs and tokens. So every write goes through a
:class:`Batcher`: the items of many runs go out together in one statement, and a run missing
from the statement's result lost its lease (that run alone: the others commit).

Endings (:meth:`Queue.finish_many`) go out at once, after one turn of the event loop, so a
lone ending is not delayed and endings that arrive while one statement is out share the next.
Event appends and checkpoints (:meth:`Queue.append_events_many`) go out on a tick: every
``EVENTS_INTERVAL_S`` one statement takes what all the runs buffered by then, whatever their
number, so commits per second grow with worker processes, not with runs or tokens. A run has
one write out at a time (its :class:`~app.worker.events.EventBuffer` sees to it): while its
statement is out, its new deltas are coalesced and ride the next one. A run's background
writes are handed over with a callback (:meth:`Batcher.submit`), with no task or future of
their own. When the database is
slow and two statements are already out, the tick waits for one of them: the interval
stretches instead of statements queueing, and every run's next write carries more.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from app import tracing
from app.domain import Finish, Finished, Usage
from app.errors import LeaseLost
from app.queue import Appended, Ended, NewEvents, NewMessages, Queue

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
Take = Callable[[], NewEvents]


class Batcher(Generic[ItemT, ResultT]):
    """Items of many runs written together by ``write_many``; a run missing from its result
    lost its lease, and its caller gets :class:`LeaseLost` (nothing was written for it).

    A caller hands over ``take``, called when the statement is built, not when the caller
    arrives: whatever its run buffered until then rides along. A caller cancelled before
    that is left out, and its ``take`` is never called. A statement starts at most every
    ``interval_s``, with up to ``max_in_flight`` of them out at once; when that many are out,
    the next waits for one to come back.
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
        self._pending: list[tuple[Callable[[], ItemT | None], Callable[[Any], None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._next_at = float("-inf")

    async def write(self, take: Callable[[], ItemT]) -> ResultT:
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self.submit(lambda: None if future.done() else take(), partial(_settle, future))
        return await future

    def submit(
        self, take: Callable[[], ItemT | None], done: Callable[[ResultT | BaseException], None]
    ) -> None:
        """:meth:`write` without waiting: ``done`` gets the run's result, or the exception that
        stands for it (:class:`LeaseLost` included). ``take`` returning ``None`` leaves the caller
        out of the statement, and ``done`` is not called."""
        self._pending.append((take, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=self._name)

    async def _drain(self) -> None:
        tracing.detach()  # started by one run's write, it writes for all of them
        loop = asyncio.get_running_loop()
        while True:
            # at least one turn of the loop: items added in this same turn join the batch
            await asyncio.sleep(max(self._next_at - loop.time(), 0.0))
            while len(self._in_flight) >= self._max_in_flight:
                await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
            if not self._pending:
                return
            cut = len(self._pending) if self._max_batch is None else self._max_batch
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            items: list[tuple[ItemT, Callable[[Any], None]]] = []
            for take, done in batch:
                try:
                    item = take()
                except Exception as exc:
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

    async def _send(self, items: list[tuple[ItemT, Callable[[Any], None]]]) -> None:
        try:
            written = await self._write_many([item for item, _ in items])
        except Exception as exc:  # each caller handles it as it would from its own statement
            # give a struggling database air before the next statement
            self._next_at = asyncio.get_running_loop().time() + self._failed_interval_s
            for _, done in items:
                done(exc)
            return
        for item, done in items:
            result = written.get(item.run_id)
            done(LeaseLost(str(item.run_id)) if result is None else result)


class Writer:
    """Where an attempt's writes go: one object per worker, shared by all its runs."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._endings: Batcher[Ended, Finished] = Batcher(queue.finish_many, name="runq-endings")
        # One item per run at a time (a run's writes are serialised by its event buffer), so a
        # worker's runs all fit in one statement.
        self._appends: Batcher[Appended, int] = Batcher(
            self._append_many,
            name="runq-events",
            interval_s=EVENTS_INTERVAL_S,
            failed_interval_s=EVENTS_FAILED_INTERVAL_S,
            max_in_flight=EVENTS_IN_FLIGHT,
            max_batch=None,
        )

    async def append(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        take: Take,
        state: Any = None,
        messages: NewMessages = (),
        usage: Usage | None = None,
    ) -> int:
        """The run's buffered events (with a ``state``, also its checkpoint, thread messages
        and the ``usage`` since the last one) on the next tick; its last seq, or
        :class:`LeaseLost` if the claim is no longer ours."""
        return await self._appends.write(
            lambda: Appended(run_id, lease_id, take(), state, messages=messages, usage=usage)
        )

    async def finish(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        finish: Finish,
        take: Take,
        messages: NewMessages = (),
        usage: Usage | None = None,
    ) -> Finished:
        """End the attempt with its buffered events, thread messages and the usage since its
        last checkpoint (batched with the other runs' endings); :class:`LeaseLost` if the claim
        is no longer ours."""
        return await self._endings.write(
            lambda: Ended(run_id, lease_id, finish, take(), messages=messages, usage=usage)
        )

    def append_in_background(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        take: Callable[[], NewEvents | None],
        done: Callable[[int | BaseException], None],
    ) -> None:
        """:meth:`append` of events alone, without waiting: ``done`` gets the run's last seq or
        the exception in its place; ``take`` returning ``None`` leaves the run out."""

        def appended() -> Appended | None:
            events = take()
            return None if events is None else Appended(run_id, lease_id, events)

        self._appends.submit(appended, done)

    async def record_effect(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, key: str, result: Any
    ) -> None:
        await self._queue.record_effect(run_id=run_id, lease_id=lease_id, key=key, result=result)

    async def _append_many(self, appended: Sequence[Appended]) -> dict[uuid.UUID, int]:
        try:
            return await self._queue.append_events_many(appended)
        except Exception as exc:  # one line per statement, not one per run
            log.warning("events of %d runs not written: %s", len(appended), exc)
            raise


def _settle(future: asyncio.Future[Any], outcome: Any) -> None:
    """A waiting caller's outcome, unless it was cancelled meanwhile."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
