"""An attempt's outgoing events: token deltas coalesced, everything else written at once.

A model streams dozens of deltas a second; one row per token would make the event log and
the NOTIFY traffic scale with tokens. Consecutive ``message.delta`` events are merged into
one and written at most every ``interval_s``; any other event first flushes the deltas
before it, so the order a reader sees is the order the agent emitted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app.domain import DatabaseUnavailable

DELTA = "message.delta"
DELTA_INTERVAL_S = 0.05

PendingEvent = tuple[str, dict[str, Any]]
Write = Callable[[list[PendingEvent]], Awaitable[Any]]

log = logging.getLogger(__name__)


class EventBuffer:
    """Buffers events and hands them to a writer, one batch (one statement) at a time.

    Writes are shielded: cancelling the agent's task mid-write lets the statement finish,
    and the lock keeps the next batch (the terminal statement included) behind it, so the
    log never has a hole or a reordering.
    """

    def __init__(
        self,
        write: Write,
        *,
        interval_s: float = DELTA_INTERVAL_S,
        on_background_error: Callable[[BaseException], None],
    ) -> None:
        self._write = write
        self._interval_s = interval_s
        self._on_background_error = on_background_error
        self._events: list[PendingEvent] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._last_write = float("-inf")

    async def add(self, type: str, data: Mapping[str, Any]) -> None:
        if type != DELTA:
            self._events.append((type, dict(data)))
            await self.flush()
            return
        self._coalesce(dict(data))
        wait = self._last_write + self._interval_s - time.monotonic()
        if wait <= 0:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.create_task(self._flush_later(wait))

    def _coalesce(self, data: dict[str, Any]) -> None:
        if self._events and self._events[-1][0] == DELTA:
            last = self._events[-1][1]
            if {k: v for k, v in last.items() if k != "text"} == {
                k: v for k, v in data.items() if k != "text"
            }:
                last["text"] = str(last.get("text", "")) + str(data.get("text", ""))
                return
        self._events.append((DELTA, data))

    async def flush(self) -> None:
        if self._events:
            await self.flush_with(self._write)

    async def flush_with(self, write: Write) -> Any:
        """Hand everything buffered to ``write`` (also when empty: a terminal statement must run)."""
        task = asyncio.ensure_future(self._write_locked(write))
        task.add_done_callback(_consume_outcome)
        return await asyncio.shield(task)

    async def flush_final(self, write: Write) -> Any:
        """:meth:`flush_with` for the last write, made after the agent's task is done: nothing
        cancels it any more, so it needs no shield (a task of its own per run)."""
        return await self._write_locked(write)

    async def _write_locked(self, write: Write) -> Any:
        async with self._lock:
            if self._timer is not None and self._timer is not asyncio.current_task():
                self._timer.cancel()
            self._timer = None
            events, self._events = self._events, []
            try:
                result = await write(events)
            except DatabaseUnavailable:
                self._events[:0] = events  # written by the next flush, or by the final statement
                raise
            self._last_write = time.monotonic()
            return result

    async def _flush_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self.flush()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # nobody awaits this task; the run must still learn of it
            self._on_background_error(exc)

    def close(self) -> None:
        """Stop the delta timer; whatever is still buffered goes with the final statement."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """A shielded write outlives a cancelled caller; its error is then nobody's to raise."""
    if not task.cancelled():
        task.exception()
