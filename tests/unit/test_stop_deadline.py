"""A worker told to stop is out within its grace period plus a margin, whatever holds it."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from app.worker.deadline import StopDeadline


async def test_a_stop_that_hangs_exits_and_names_what_was_still_running(caplog: pytest.LogCaptureFixture) -> None:
    exited = threading.Event()
    codes: list[int] = []
    deadline = StopDeadline(0.2, exit=lambda code: (codes.append(code), exited.set()))
    stuck = asyncio.create_task(asyncio.Event().wait(), name="webhook-sender")
    with caplog.at_level(logging.ERROR):
        deadline.arm()
        deadline.arm()  # a second signal starts no second timer
        assert await asyncio.to_thread(exited.wait, 5)
    stuck.cancel()
    assert codes == [1]
    assert "webhook-sender" in caplog.text


async def test_a_stop_that_ends_in_time_exits_nobody() -> None:
    exited = threading.Event()
    deadline = StopDeadline(0.1, exit=lambda _code: exited.set())
    deadline.arm()
    deadline.disarm()
    assert not await asyncio.to_thread(exited.wait, 0.3)
