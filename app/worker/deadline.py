"""The last resort of a worker told to stop: out within its grace period plus a margin, whatever
state its connections, threads or agents are in.

A graceful stop waits on the database (a lease released, the worker unregistered) and on the
agents; a database that went away mid-stop, or an agent blocking the event loop, must not keep
the process alive for minutes (a stopped deployment, a harness that waits for it). A timer
thread, so a blocked event loop cannot hold it back, logs what was still running and exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

MARGIN_S = 10.0  # past the grace period: the heartbeat's last beat, the pools closing


class StopDeadline:
    """``arm()`` at the first stop signal; the process exits ``after_s`` later unless it ended."""

    def __init__(self, after_s: float, *, exit: Callable[[int], object] = os._exit) -> None:
        self._after_s = after_s
        self._exit = exit
        self._timer: threading.Timer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self) -> None:
        if self._timer is not None:
            return  # a second signal changes nothing
        self._loop = asyncio.get_running_loop()
        self._timer = threading.Timer(self._after_s, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expired(self) -> None:
        log.error(
            "still running %.0f s after the stop signal; exiting now. Unfinished: %s",
            self._after_s,
            ", ".join(sorted(_unfinished(self._loop))) or "no task (a thread or the loop itself)",
        )
        self._exit(1)


def _unfinished(loop: asyncio.AbstractEventLoop | None) -> list[str]:
    if loop is None:
        return []
    try:  # from another thread: a snapshot that may race with the loop, good enough for a log
        return [task.get_name() for task in asyncio.all_tasks(loop) if not task.done()]
    except RuntimeError:
        return []
