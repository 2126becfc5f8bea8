"""An attempt's outgoing events, buffered until the worker's next event statement.

A model streams dozens of deltas a second; one row per token would make the event log and
the NOTIFY traffic scale with tokens. Consecutive ``message.delta`` events are merged into
one, and everything the run buffered goes out with the worker's next event statement (see
:mod:`app.worker.writer`), which takes it only when that statement is built. The agent never
waits for a write: a database that is down or busy delays its events, it never stops the
model stream; the events stay buffered, in order, and go with the next statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app.domain import DatabaseUnavailable

DELTA = "message.delta"

PendingEvent = tuple[str, dict[str, Any]]
Take = Callable[[], list[PendingEvent]]
# A write is handed ``take`` and calls it when its statement is built; the buffer's events
# up to then are the ones written.
Write = Callable[[Take], Awaitable[Any]]


class EventBuffer:
    """Buffers one attempt's events and hands them to a writer, one write at a time.

    Writes are shielded: cancelling the agent's task mid-write lets the statement finish,
    and the lock keeps the next write (the terminal statement included) behind it, so the
    log never has a hole or a reordering.
    """

    def __init__(
        self, write: Write, *, on_background_error: Callable[[BaseException], None]
    ) -> None:
        self._write = write
        self._on_background_error = on_background_error
        self._events: list[PendingEvent] = []
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None

    def add(self, type: str, data: Mapping[str, Any]) -> None:
        """Buffer an event; it is written by the worker's next event statement."""
        if type == DELTA:
            self._coalesce(dict(data))
        else:
            self._events.append((type, dict(data)))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_in_background())

    def _coalesce(self, data: dict[str, Any]) -> None:
        if self._events and self._events[-1][0] == DELTA:
            last = self._events[-1][1]
            if {k: v for k, v in last.items() if k != "text"} == {
                k: v for k, v in data.items() if k != "text"
            }:
                last["text"] = str(last.get("text", "")) + str(data.get("text", ""))
                return
        self._events.append((DELTA, data))

    async def _flush_in_background(self) -> None:
        try:
            while self._events:
                try:
                    await self._write_locked(self._write)
                except DatabaseUnavailable as exc:  # kept, in order: the next statement retries
                    self._on_background_error(exc)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # nobody awaits this task; the run must still learn of it
            self._on_background_error(exc)
        finally:
            if self._flusher is asyncio.current_task():
                self._flusher = None

    async def flush_with(self, write: Write) -> Any:
        """Hand everything buffered to ``write`` (also when empty: a checkpoint must be stored)."""
        task = asyncio.ensure_future(self._write_locked(write))
        task.add_done_callback(_consume_outcome)
        return await asyncio.shield(task)

    async def flush_final(self, write: Write) -> Any:
        """:meth:`flush_with` for the last write, made after the agent's task is done: nothing
        cancels it any more, so it needs no shield (a task of its own per run)."""
        return await self._write_locked(write)

    async def _write_locked(self, write: Write) -> Any:
        async with self._lock:
            taken: list[PendingEvent] = []

            def take() -> list[PendingEvent]:
                nonlocal taken
                taken, self._events = self._events, []
                return taken

            try:
                return await write(take)
            except DatabaseUnavailable:
                self._events[:0] = taken  # written by the next statement, or by the final one
                raise

    def close(self) -> None:
        """Stop writing in the background; whatever is still buffered goes with the final statement."""
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """A shielded write outlives a cancelled caller; its error is then nobody's to raise."""
    if not task.cancelled():
        task.exception()
