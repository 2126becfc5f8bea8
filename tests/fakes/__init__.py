"""Test doubles that speak real protocols: a fake OpenAI server, an in-memory run context."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T] | T], *, within_s: float = 30.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``within_s`` seconds (a
    ceiling for a loaded machine, where a worker process may take seconds to start)."""
    deadline = time.monotonic() + within_s
    while True:
        value = probe()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within_s}s")
        await asyncio.sleep(0.02)
