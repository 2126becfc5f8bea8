"""A tenant's turns at creating runs (app/queue/turns.py): at most its share in the database at
once, other tenants never wait for it, and a tenant that creates nothing holds no memory."""

from __future__ import annotations

import asyncio

from sqlalchemy.pool import NullPool, QueuePool

from app.queue.turns import CreateTurns


async def test_a_tenant_holds_at_most_its_share_and_others_pass() -> None:
    turns = CreateTurns(2)
    inside: list[str] = []
    release = asyncio.Event()

    async def create(tenant: str) -> None:
        async with turns.turn(tenant):
            inside.append(tenant)
            await release.wait()

    burst = [asyncio.create_task(create("noisy")) for _ in range(5)]
    await asyncio.sleep(0)  # every task reaches its turn
    assert inside == ["noisy", "noisy"]
    async with asyncio.timeout(1):
        async with turns.turn("quiet"):  # at once, beside the noisy tenant's queue
            pass
    release.set()
    await asyncio.gather(*burst)
    assert inside.count("noisy") == 5
    assert len(turns) == 0


def test_the_share_is_a_quarter_of_the_pool() -> None:
    assert CreateTurns.of_pool(QueuePool(lambda: None, pool_size=10)).share == 2
    assert CreateTurns.of_pool(QueuePool(lambda: None, pool_size=2)).share == 1
    assert CreateTurns.of_pool(NullPool(lambda: None)).share == 1
