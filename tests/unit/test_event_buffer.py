"""The worker's event buffer: deltas coalesced, written in the background one write at a time,
kept in order through a failed write (no database: the writer records what it takes)."""

from __future__ import annotations

import asyncio

import pytest

from app.errors import DatabaseUnavailable
from app.worker.events import (
    BackgroundTake,
    EventBuffer,
    PendingEvent,
    Submit,
    Take,
    Write,
    Written,
)


class Recorder:
    """A writer that takes the buffer's events when let through (``gate``), as the worker's
    tick does, and can fail a write as a database outage would."""

    def __init__(self) -> None:
        self.batches: list[list[PendingEvent]] = []
        self.failures = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.wrote = asyncio.Event()

    async def __call__(self, take: Take) -> None:
        await self.gate.wait()
        events = take()
        if self.failures:
            self.failures -= 1
            raise DatabaseUnavailable("down")
        if events:  # not a background write left out
            self.batches.append(events)
        self.wrote.set()


def in_background(write: Write) -> Submit:
    """The buffer's background writes made by ``write``, each in a task, as the worker's writer
    makes them at its next tick: ``done`` is called unless the write was left out."""
    tasks: set[asyncio.Task[None]] = set()

    def submit(take: BackgroundTake, done: Written, urgent: bool) -> None:
        left_out = False

        def taking() -> list[PendingEvent]:
            nonlocal left_out
            events = take()
            left_out = events is None
            return events or []

        async def background() -> None:
            try:
                await write(taking)
            except Exception as exc:
                done(exc)
            else:
                if not left_out:
                    done(None)

        task = asyncio.create_task(background())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return submit


def buffer(recorder: Recorder, errors: list[BaseException] | None = None) -> EventBuffer:
    def background_error(exc: BaseException) -> None:
        if errors is None:
            raise AssertionError(f"unexpected background error {exc!r}")
        errors.append(exc)

    return EventBuffer(in_background(recorder), on_background_error=background_error)


async def written(recorder: Recorder, batches: int) -> list[list[PendingEvent]]:
    async with asyncio.timeout(10):
        while len(recorder.batches) < batches:
            recorder.wrote.clear()
            await recorder.wrote.wait()
    return recorder.batches


async def test_consecutive_deltas_are_concatenated_up_to_the_next_event() -> None:
    recorder = Recorder()
    events = buffer(recorder)
    for piece in ["a", "b", "c"]:
        events.add("message.delta", {"text": piece})
    events.add("message.completed", {"text": "abc"})
    events.add("message.delta", {"text": "d"})
    assert await written(recorder, 1) == [
        [("message.delta", {"text": "abc"}), ("message.completed", {"text": "abc"}), ("message.delta", {"text": "d"})]
    ]


async def test_deltas_with_different_metadata_stay_apart() -> None:
    recorder = Recorder()
    events = buffer(recorder)
    events.add("message.delta", {"text": "a", "index": 0})
    events.add("message.delta", {"text": "b", "index": 1})
    events.add("message.delta", {"text": "c", "index": 1})
    assert await written(recorder, 1) == [
        [("message.delta", {"text": "a", "index": 0}), ("message.delta", {"text": "bc", "index": 1})]
    ]


async def test_events_buffered_during_a_write_go_together_with_the_next() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    events = buffer(recorder)
    events.add("message.delta", {"text": "a"})
    await asyncio.sleep(0)  # the background write is out, waiting for its statement
    events.add("message.delta", {"text": "b"})
    recorder.gate.set()
    await written(recorder, 1)
    events.add("message.delta", {"text": "c"})
    events.add("message.delta", {"text": "d"})
    # taken when the statement is built: "b" rides the first write, not a write of its own
    assert await written(recorder, 2) == [[("message.delta", {"text": "ab"})], [("message.delta", {"text": "cd"})]]


async def test_a_failed_write_keeps_the_events_in_order_for_the_next() -> None:
    recorder = Recorder()
    recorder.failures = 2
    errors: list[BaseException] = []
    events = buffer(recorder, errors)
    events.add("tool.call", {"tool_call_id": "1"})
    events.add("message.delta", {"text": "a"})
    assert await written(recorder, 1) == [[("tool.call", {"tool_call_id": "1"}), ("message.delta", {"text": "a"})]]
    assert [type(e) for e in errors] == [DatabaseUnavailable, DatabaseUnavailable]


async def test_a_final_statement_takes_what_is_buffered() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    events = buffer(recorder)
    events.add("message.delta", {"text": "a"})
    taken: list[list[PendingEvent]] = []

    async def final(take: Take) -> str:
        taken.append(take())
        return "done"

    ending = asyncio.create_task(events.flush_final(final))
    events.add("message.delta", {"text": "b"})
    recorder.gate.set()
    assert await ending == "done"  # behind the background write, with what came after it
    assert recorder.batches == [[("message.delta", {"text": "ab"})]]
    assert taken == [[]]
    assert await events.flush_with(final) == "done"  # runs even with nothing buffered
    assert taken == [[], []]


async def test_a_failed_checkpoint_keeps_its_events() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    events = buffer(recorder)
    events.add("tool.call", {"tool_call_id": "1"})

    async def failing(take: Take) -> None:
        take()
        raise DatabaseUnavailable("down")

    checkpoint = asyncio.create_task(events.flush_with(failing))
    recorder.gate.set()
    await written(recorder, 1)
    events.add("tool.result", {"tool_call_id": "1"})
    with pytest.raises(DatabaseUnavailable):
        await checkpoint
    assert await written(recorder, 2) == [
        [("tool.call", {"tool_call_id": "1"})],
        [("tool.result", {"tool_call_id": "1"})],
    ]


async def test_a_cancelled_caller_does_not_cut_a_write_short() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    written_: list[list[PendingEvent]] = []

    async def slow(take: Take) -> None:
        events = take()
        started.set()
        await release.wait()
        written_.append(events)

    events = EventBuffer(in_background(slow), on_background_error=lambda exc: None)
    events.add("tool.call", {"tool_call_id": "1"})
    caller = asyncio.create_task(events.flush_with(slow))
    await started.wait()
    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    release.set()
    final: list[list[PendingEvent]] = []

    async def last(take: Take) -> None:
        final.append(take())

    await events.flush_final(last)  # waits behind the write, keeping the order
    assert written_ == [[("tool.call", {"tool_call_id": "1"})], []]
    assert final == [[]]


async def test_once_closed_nothing_more_goes_in_the_background() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    events = buffer(recorder)
    events.add("message.delta", {"text": "a"})  # handed over, not taken yet
    events.close()
    recorder.gate.set()
    taken: list[list[PendingEvent]] = []

    async def final(take: Take) -> None:
        taken.append(take())

    await events.flush_final(final)
    assert taken == [[("message.delta", {"text": "a"})]]
    assert recorder.batches == []
