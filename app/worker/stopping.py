"""What stops an attempt early, from wherever it comes: the heartbeat thread (a lost lease, a
cancel), LISTEN (a cancel), the runner (a deadline, a shutdown), the budget, or one of the
attempt's own writes that failed (app/worker/attempt.py).

Two threads touch it: the event loop runs the agent and writes, the heartbeat thread reports a
lost lease or a cancel and kills the run's tools at once, even while an agent blocks the loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.errors import DatabaseUnavailable, InvalidData, LeaseLost
from app.tools.shell import ProcessGroups
from app.worker.decide import StopReason


class Stoppable:
    """An attempt's stop state: the reason it stops (read by ``decide``), the run's task to cancel,
    the tool process groups to kill."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.groups = ProcessGroups()
        self.stop_reason: StopReason | None = None
        self.failure: str | None = None  # why the run's writes failed (invalid_data, write_failed)
        self._loop = loop
        self._lock = threading.Lock()
        self._cancelled = False
        self._task: asyncio.Task[Any] | None = None  # the run's task while its agent runs
        self._closed = False

    def lease_lost(self) -> None:
        """Heartbeat thread: kill the tools now, even if the event loop is blocked."""
        self._mark_stopped("lease_lost")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def cancel_requested(self) -> None:
        """Heartbeat thread or LISTEN: the same as a lost lease, but the run then ends cancelled."""
        if self._cancelled:
            return
        self._mark_stopped("cancel")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def stop(self, reason: StopReason) -> None:
        """Event loop only."""
        self._mark_stopped(reason)
        self._cancel_task()

    def _write_failed(self, exc: BaseException) -> None:
        """A write of this attempt failed: a lost lease stops it; a value that could not be
        stored ends the run dead (``invalid_data``), any other error ends the attempt
        (``write_failed``, retried), since an event it held is gone. An unreachable database
        stops nothing: the write is made again. Called in the agent's own task too, so the
        agent is cancelled from the next turn of the loop, when it has not returned by then."""
        if isinstance(exc, LeaseLost):
            self.stop("lease_lost")
            return
        if isinstance(exc, DatabaseUnavailable):
            return
        reason: StopReason = "invalid_data" if isinstance(exc, InvalidData) else "write_failed"
        with self._lock:
            if self.failure is None:
                self.failure = str(exc) if reason == "invalid_data" else f"{type(exc).__name__}: {exc}"
        self._mark_stopped(reason)
        self._loop.call_soon(self._cancel_task)

    def _mark_stopped(self, reason: StopReason) -> None:
        # The reason is recorded before the agent can see ``cancelled``: an agent that raises
        # on it at once must still end as cancelled, not as a failure.
        with self._lock:
            if self.stop_reason is None or reason == "lease_lost":  # a lost lease overrides all
                self.stop_reason = reason
        self._cancelled = True  # a plain flag, read by agents that poll it
        self.groups.kill_all()

    def _cancel_task(self) -> None:
        if not self._closed and self._task is not None:
            self._task.cancel()

    # -- the agent's side ----------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError("the run was asked to stop")

