"""An attempt's outgoing events, buffered until the worker's next event statement.

A model streams dozens of deltas a second; one row per token would make the event log and
the NOTIFY traffic scale with tokens. Consecutive ``message.delta`` events are merged into
one, and everything the run buffered goes out with the worker's next event statement (see
:mod:`app.worker.writer`), which takes it only when that statement is built: on the writer's
tick for tokens, at once for any other event (a follower waits for a ``tool.result``, not for a
tick). The agent never waits for a write: a database that is down or busy delays its events, it
never stops the model stream; the events stay buffered, in order, and go with the next statement.
An event's data is buffered as the attempt hands it over: a token's as a dict (merged with the
next), any other's as JSON text already (encoded when it was emitted, app/worker/attempt.py).

A background write is handed to the writer with a callback, not awaited by a task of its own:
a streaming run adds about one delta per tick, and a task, a future and a chain of coroutines
per write were a quarter of a streaming worker's CPU.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import DatabaseUnavailable, InvalidData, LeaseLost

DELTA = "message.delta"
# Deltas merged into one no larger than this (the attempt asks for a sixteenth of the largest
# value a run may store: a character is at most six bytes of JSON), however long a run streams
# between two statements.
MAX_MERGED_CHARS = 1 << 19

PendingEvent = tuple[str, Any]  # (type, data): a delta's dict, or any other event's JSON text
Take = Callable[[], list[PendingEvent]]
# A write is handed ``take`` and calls it when its statement is built; the buffer's events
# up to then are the ones written.
Write = Callable[[Take], Awaitable[Any]]
# A background write: ``take`` (``None``: nothing to write any more, leave the run out of the
# statement) and the callback that gets the statement's outcome, ``None`` or its error.
BackgroundTake = Callable[[], list[PendingEvent] | None]
Written = Callable[[BaseException | None], None]
Submit = Callable[[BackgroundTake, Written, bool], None]  # the bool: urgent

log = logging.getLogger(__name__)


class EventBuffer:
    """Buffers one attempt's events and hands them to a writer, one write at a time.

    Checkpoints and the ending are written under a lock, behind the background write that is
    out (if any), and no background write starts while they hold it, so the log never has a
    hole or a reordering. They are shielded: cancelling the agent's task mid-write lets the
    statement finish, and the lock keeps the next write (the terminal statement included)
    behind it.
    """

    def __init__(
        self,
        submit: Submit,
        *,
        hurry: Callable[[], None] = lambda: None,
        on_background_error: Callable[[BaseException], None] | None = None,
        max_merged_chars: int = MAX_MERGED_CHARS,
    ) -> None:
        self._submit: Submit | None = submit  # None once closed
        self._hurry = hurry  # the background write out goes at once: a locked write waits for it
        self._max_merged_chars = max_merged_chars
        # a function, not a method of the buffer's owner: this buffer must not hold its attempt
        # once closed (see close)
        self._on_background_error = on_background_error or report_background_error
        self._events: list[PendingEvent] = []
        self._urgent = False  # an event of _events is not a token: it goes at once
        self._lock = asyncio.Lock()
        self._background = False  # a background write is handed over and not settled yet
        self._taken: list[PendingEvent] = []  # by that write, put back if the database is down
        self._settled: asyncio.Future[None] | None = None  # for a locked write waiting for it

    def add(self, type: str, data: Any) -> None:
        """Buffer an event: a token (its data a dict, merged with the one before when it can
        be) goes with the worker's next event statement, any other event (its data as its
        attempt encoded it) at once."""
        if type == DELTA:
            self._coalesce(dict(data))
        else:
            self._events.append((type, data))
            self._urgent = True
        self._write_in_background()

    def _coalesce(self, data: dict[str, Any]) -> None:
        if self._events and self._events[-1][0] == DELTA:
            last = self._events[-1][1]
            text, more = str(last.get("text", "")), str(data.get("text", ""))
            if len(text) + len(more) <= self._max_merged_chars and {
                k: v for k, v in last.items() if k != "text"
            } == {k: v for k, v in data.items() if k != "text"}:
                last["text"] = text + more
                return
        self._events.append((DELTA, data))

    def _write_in_background(self) -> None:
        if self._events and self._submit is not None and not (self._background or self._lock.locked()):
            self._background = True
            self._submit(self._take_background, self._background_written, self._urgent)

    def _take_background(self) -> list[PendingEvent] | None:
        if self._submit is None or not self._events:  # closed: the final statement takes them
            self._settle()
            return None
        self._taken, self._events = self._events, []
        self._urgent = False
        return self._taken

    def _background_written(self, error: BaseException | None) -> None:
        if isinstance(error, DatabaseUnavailable):  # kept, in order: the next statement retries
            self._events[:0] = self._taken
            self._urgent = self._urgent or any(type != DELTA for type, _ in self._taken)
        self._taken = []
        self._settle()
        if error is not None:
            self._on_background_error(error)
        if error is None or isinstance(error, DatabaseUnavailable):
            self._write_in_background()  # what came meanwhile goes with the next statement

    def _settle(self) -> None:
        self._background = False
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)
        self._settled = None

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
        try:
            async with self._lock:
                if self._background:
                    if self._settled is None:
                        self._settled = asyncio.get_running_loop().create_future()
                    self._hurry()  # not at the writer's tick: this write waits for it
                    await self._settled
                taken: list[PendingEvent] = []

                def take() -> list[PendingEvent]:
                    nonlocal taken
                    taken, self._events = self._events, []
                    self._urgent = False
                    return taken

                try:
                    return await write(take)
                except DatabaseUnavailable:
                    self._events[:0] = taken  # written by the next statement, or by the final one
                    self._urgent = self._urgent or any(type != DELTA for type, _ in taken)
                    raise
        finally:
            self._write_in_background()  # what the agent added while the lock was held

    def close(self) -> None:
        """Stop writing in the background; whatever is still buffered goes with the final statement.

        The writer is let go: it is the attempt's, which holds this buffer, and that cycle left
        each run's objects to the garbage collector (a tenth of a no-op run's worker CPU)."""
        self._submit = None


def report_background_error(exc: BaseException) -> None:
    """A background write's failure, unless another path reports it."""
    if isinstance(exc, LeaseLost):
        return  # the attempt's writes stop the run on it
    if isinstance(exc, DatabaseUnavailable):
        return  # kept for the next statement; the writer logs each failed one
    if isinstance(exc, InvalidData):
        return  # its run ends dead, the reason in its ending
    log.error("buffered events not written", exc_info=exc)


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """A shielded write outlives a cancelled caller; its error is then nobody's to raise."""
    if not task.cancelled():
        task.exception()
