"""A process-wide loop of the API (the LISTEN hub, the presence refresher), run as a task
from the app's start-up until its shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any


class BackgroundLoop:
    """``forever`` run as a named task between :meth:`start` and :meth:`stop`. Stopping waits
    for the task to end, so its ``finally`` blocks (a LISTEN connection closed, ...) have run
    before the app's engine is disposed."""

    def __init__(self, forever: Callable[[], Coroutine[Any, Any, None]], *, name: str) -> None:
        self._forever = forever
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
