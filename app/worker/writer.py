"""The worker's writes for all its runs, each fenced by its run's own lease.

A no-op run costs a claim and an ending; alone, each ending is a transaction with its own
commit (and WAL flush). Endings that arrive while one statement is out wait for it and go out
together in :meth:`Queue.finish_many`, so under load one commit ends many runs, while a lone
ending still goes out at once (after one turn of the event loop). :class:`Batcher` is that
mechanism for any per-run item whose statement reports which runs it wrote; appends and
checkpoints go out one statement per call today, and can go through a batcher of their own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from app.domain import Finished, LeaseLost
from app.queue import Ended, NewEvents, Queue

MAX_BATCH = 64


class _Item(Protocol):
    @property
    def run_id(self) -> uuid.UUID: ...


ItemT = TypeVar("ItemT", bound=_Item)
ResultT = TypeVar("ResultT")


class Batcher(Generic[ItemT, ResultT]):
    """Items of many runs written together by ``write_many``; a run missing from its result
    lost its lease, and its caller gets :class:`LeaseLost` (nothing was written for it)."""

    def __init__(self, write_many: Callable[[Sequence[ItemT]], Awaitable[Mapping[uuid.UUID, ResultT]]], *, name: str) -> None:
        self._write_many = write_many
        self._name = name
        self._pending: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, item: ItemT) -> ResultT:
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=self._name)
        return await future

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # items added in this same turn of the loop join the batch
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                written = await self._write_many([item for item, _ in batch])
            except Exception as exc:  # each waiter handles it as it would from its own statement
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for item, future in batch:
                if future.done():  # its run's task was cancelled meanwhile
                    continue
                result = written.get(item.run_id)
                if result is None:
                    future.set_exception(LeaseLost(str(item.run_id)))
                else:
                    future.set_result(result)


class Writer:
    """Where an attempt's writes go: one object per worker, shared by all its runs."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._endings: Batcher[Ended, Finished] = Batcher(queue.finish_many, name="runq-endings")

    async def append(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents) -> None:
        await self._queue.append_events(run_id=run_id, lease_id=lease_id, events=events)

    async def checkpoint(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, state: Any, events: NewEvents) -> None:
        await self._queue.save_checkpoint(run_id=run_id, lease_id=lease_id, state=state, events=events)

    async def record_effect(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, key: str, result: Any) -> None:
        await self._queue.record_effect(run_id=run_id, lease_id=lease_id, key=key, result=result)

    async def finish(self, ended: Ended) -> Finished:
        """End the attempt (batched with the other runs' endings); :class:`LeaseLost` if the
        claim is no longer ours."""
        return await self._endings.write(ended)
