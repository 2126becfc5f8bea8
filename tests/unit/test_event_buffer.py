"""Delta coalescing in the worker's event buffer (no database: the writer records batches)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.domain import DatabaseUnavailable
from app.worker.events import EventBuffer, PendingEvent


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[PendingEvent]] = []
        self.fail_next = False

    async def __call__(self, events: list[PendingEvent]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise DatabaseUnavailable("down")
        self.batches.append(events)


def buffer(recorder: Recorder, interval_s: float = 0.05) -> EventBuffer:
    def fail(exc: BaseException) -> None:
        raise AssertionError(f"unexpected background error {exc!r}")

    return EventBuffer(recorder, interval_s=interval_s, on_background_error=fail)


async def test_consecutive_deltas_are_concatenated_and_flushed_before_other_events() -> None:
    recorder = Recorder()
    events = buffer(recorder, interval_s=60)
    await events.add("message.delta", {"text": "a"})  # first delta: written at once
    for piece in ["b", "c", "d"]:
        await events.add("message.delta", {"text": piece})
    await events.add("message.completed", {"text": "abcd"})
    assert recorder.batches == [
        [("message.delta", {"text": "a"})],
        [("message.delta", {"text": "bcd"}), ("message.completed", {"text": "abcd"})],
    ]


async def test_deltas_with_different_metadata_stay_apart() -> None:
    recorder = Recorder()
    events = buffer(recorder, interval_s=60)
    await events.add("message.delta", {"text": "x", "index": 0})
    await events.add("message.delta", {"text": "a", "index": 0})
    await events.add("message.delta", {"text": "b", "index": 1})
    await events.add("message.delta", {"text": "c", "index": 1})
    await events.flush()
    assert recorder.batches[1] == [
        ("message.delta", {"text": "a", "index": 0}),
        ("message.delta", {"text": "bc", "index": 1}),
    ]


async def test_buffered_deltas_are_flushed_by_the_timer() -> None:
    recorder = Recorder()
    events = buffer(recorder, interval_s=0.05)
    await events.add("message.delta", {"text": "a"})
    await events.add("message.delta", {"text": "b"})
    await events.add("message.delta", {"text": "c"})
    assert len(recorder.batches) == 1
    for _ in range(100):
        if len(recorder.batches) == 2:
            break
        await asyncio.sleep(0.01)
    assert recorder.batches[1] == [("message.delta", {"text": "bc"})]


async def test_a_final_statement_takes_what_is_buffered() -> None:
    recorder = Recorder()
    events = buffer(recorder, interval_s=60)
    await events.add("message.delta", {"text": "a"})
    await events.add("message.delta", {"text": "b"})
    taken: list[Any] = []

    async def final(batch: list[PendingEvent]) -> str:
        taken.append(batch)
        return "done"

    assert await events.flush_with(final) == "done"
    assert taken == [[("message.delta", {"text": "b"})]]
    assert await events.flush_with(final) == "done"  # runs even with nothing buffered
    assert taken[1] == []


async def test_events_survive_a_failed_write() -> None:
    recorder = Recorder()
    events = buffer(recorder, interval_s=60)
    recorder.fail_next = True
    with pytest.raises(DatabaseUnavailable):
        await events.add("tool.call", {"tool_call_id": "1"})
    await events.add("tool.result", {"tool_call_id": "1"})
    assert recorder.batches == [
        [("tool.call", {"tool_call_id": "1"}), ("tool.result", {"tool_call_id": "1"})]
    ]


async def test_a_cancelled_caller_does_not_cut_a_write_short() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    written: list[list[PendingEvent]] = []

    async def slow(batch: list[PendingEvent]) -> None:
        started.set()
        await release.wait()
        written.append(batch)

    events = EventBuffer(slow, on_background_error=lambda exc: None)
    caller = asyncio.create_task(events.add("tool.call", {"tool_call_id": "1"}))
    await started.wait()
    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    release.set()
    final: list[list[PendingEvent]] = []

    async def last(batch: list[PendingEvent]) -> None:
        final.append(batch)

    await events.flush_with(last)  # waits behind the shielded write, keeping the order
    assert written == [[("tool.call", {"tool_call_id": "1"})]]
    assert final == [[]]
