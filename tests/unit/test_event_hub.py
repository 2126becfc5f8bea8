"""The hub's reads: one statement for every stream woken together, never a stale one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from app.api.listener import Cursor, EventHub


class Reads:
    """A batch reader that records each batch and answers ``(run_id, after, batch number)``."""

    def __init__(self) -> None:
        self.batches: list[list[Cursor]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()

    async def __call__(self, cursors: Sequence[Cursor]) -> list[tuple[uuid.UUID, int, int]]:
        self.batches.append(list(cursors))
        self.started.set()
        number = len(self.batches)
        await self.gate.wait()
        return [(run_id, after, number) for run_id, after in cursors]


async def test_reads_asked_together_go_out_as_one_batch_and_share_equal_cursors() -> None:
    reads = Reads()
    hub = EventHub("postgresql://unused", reads)
    a, b = uuid.uuid4(), uuid.uuid4()
    results = await asyncio.gather(*(hub.read(a, 0) for _ in range(5)), *(hub.read(b, 3) for _ in range(5)))
    assert reads.batches == [[(a, 0), (b, 3)]]
    assert results == [(a, 0, 1)] * 5 + [(b, 3, 1)] * 5


async def test_a_read_asked_while_one_is_out_waits_for_the_next() -> None:
    reads = Reads()
    reads.gate.clear()
    hub = EventHub("postgresql://unused", reads)
    run = uuid.uuid4()
    first = asyncio.create_task(hub.read(run, 7))
    async with asyncio.timeout(5):
        await reads.started.wait()
    # Woken by an event that may have committed after the first read's snapshot: it must
    # not be answered by that read.
    second = asyncio.create_task(hub.read(run, 7))
    await asyncio.sleep(0)
    reads.gate.set()
    assert await first == (run, 7, 1)
    assert await second == (run, 7, 2)
    assert reads.batches == [[(run, 7)], [(run, 7)]]


async def test_a_failed_read_fails_its_streams_and_the_next_one_still_runs() -> None:
    calls = 0

    async def flaky(cursors: Sequence[Cursor]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database down")
        return [after for _, after in cursors]

    hub = EventHub("postgresql://unused", flaky)
    run = uuid.uuid4()
    failed = await asyncio.gather(hub.read(run, 1), return_exceptions=True)
    assert isinstance(failed[0], ConnectionError)
    assert await hub.read(run, 2) == 2
