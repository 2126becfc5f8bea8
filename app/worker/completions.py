"""Runs of one worker that finish together are completed in one statement.

A no-op run costs a claim and a completion; alone, each completion is a transaction with its
own commit (and WAL flush). Completions that arrive while one is being written wait for it and
go out together in :meth:`Queue.complete_many`, so under load one commit finishes many runs,
while a lone completion still goes out at once (after one turn of the event loop).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from app.domain import Completed, LeaseLost
from app.queue import NewEvents, Queue

MAX_BATCH = 64

_Pending = tuple[uuid.UUID, uuid.UUID, Any, NewEvents, "asyncio.Future[Completed]"]


class CompletionBatcher:
    """``complete`` with the semantics of :meth:`Queue.complete`, written in batches."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._pending: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None

    async def complete(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, output: Any, events: NewEvents
    ) -> Completed:
        """``done`` with ``run.completed``; :class:`LeaseLost` if the claim is no longer ours."""
        future: asyncio.Future[Completed] = asyncio.get_running_loop().create_future()
        self._pending.append((run_id, lease_id, output, events, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="runq-completions")
        return await future

    async def _write(self) -> None:
        await asyncio.sleep(0)  # runs finishing in this same turn of the loop join the batch
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                done = await self._queue.complete_many([entry[:4] for entry in batch])
            except Exception as exc:  # each waiter handles it as it would from complete()
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for run_id, *_, future in batch:
                if future.done():  # its run task was cancelled meanwhile
                    continue
                run = done.get(run_id)
                future.set_result(run) if run is not None else future.set_exception(LeaseLost(str(run_id)))
