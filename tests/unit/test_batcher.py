"""The worker's batched writes (app/worker/writer.py): a run's fault stays its own, and a write
someone waits for never waits for the tick. No database: ``write_many`` is a function here."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.errors import DatabaseUnavailable, InvalidData
from app.worker.writer import Batcher


@dataclass(frozen=True)
class Item:
    run_id: uuid.UUID
    bad: bool = False


class Refused(Exception):
    """What the driver raises when PostgreSQL refuses a value (a data exception)."""

    sqlstate = "22023"


class Statements:
    """Writes every item whose run is not bad; a statement with a bad item is refused whole."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def __call__(self, items: Sequence[Item]) -> Mapping[uuid.UUID, str]:
        self.sent.append(len(items))
        await asyncio.sleep(0)
        if any(item.bad for item in items):
            raise Refused("value out of range")
        return {item.run_id: f"written {item.run_id}" for item in items}


async def test_a_refused_statement_is_split_until_the_run_at_fault_is_alone() -> None:
    statements = Statements()
    batcher: Batcher[Item, str] = Batcher(statements, name="test", max_batch=None)
    items = [Item(uuid.uuid4(), bad=(i == 11)) for i in range(32)]
    results = await asyncio.gather(*(batcher.write(lambda i=i: i) for i in items), return_exceptions=True)
    for item, result in zip(items, results, strict=True):
        if item.bad:
            assert isinstance(result, InvalidData) and "refused" in str(result)
        else:
            assert result == f"written {item.run_id}"
    assert statements.sent[0] == 32 and len(statements.sent) <= 1 + 2 * 5  # halves down to one run


async def test_a_take_that_raises_fails_its_own_caller_only() -> None:
    statements = Statements()
    batcher: Batcher[Item, str] = Batcher(statements, name="test")
    good = Item(uuid.uuid4())

    def bad_take() -> Item:
        raise InvalidData("a value of this run cannot be stored")

    bad, ok = await asyncio.gather(batcher.write(bad_take), batcher.write(lambda: good), return_exceptions=True)
    assert isinstance(bad, InvalidData) and ok == f"written {good.run_id}"
    assert statements.sent == [1]


async def test_an_unreachable_database_fails_every_run_of_the_statement_without_splitting() -> None:
    sent: list[int] = []

    async def down(items: Sequence[Item]) -> Mapping[uuid.UUID, str]:
        sent.append(len(items))
        raise DatabaseUnavailable("connection refused")

    batcher: Batcher[Item, str] = Batcher(down, name="test")
    results = await asyncio.gather(*(batcher.write(lambda: Item(uuid.uuid4())) for _ in range(4)), return_exceptions=True)
    assert all(isinstance(r, DatabaseUnavailable) for r in results) and sent == [4]


async def test_an_urgent_write_goes_at_once_and_takes_the_waiting_ones_along() -> None:
    statements = Statements()
    batcher: Batcher[Item, str] = Batcher(statements, name="test", interval_s=60, max_in_flight=2, max_batch=None)
    await batcher.write(lambda: Item(uuid.uuid4()))  # the tick starts: the next is a minute away
    waiting = asyncio.create_task(batcher.write(lambda: Item(uuid.uuid4())))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done()  # a token's write waits for the tick
    await asyncio.wait_for(batcher.write(lambda: Item(uuid.uuid4()), urgent=True), timeout=10)
    await asyncio.wait_for(waiting, timeout=10)  # it rode along (group commit)
    assert statements.sent == [1, 2]
