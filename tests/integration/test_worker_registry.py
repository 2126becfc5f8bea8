"""The worker registry in the queue: the heartbeat's renewal registers a worker (with or
without leases), a clean exit forgets it, the reaper pass forgets it once stale."""

from __future__ import annotations

import dataclasses

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import WorkerInfo
from app.queue import Queue, WorkerView
from tests.worker_support import enqueue_demo


async def by_id(queue: Queue) -> dict[str, WorkerView]:
    return {w.worker_id: w for w in await queue.list_workers()}


async def test_a_beat_without_leases_registers_the_worker(queue: Queue) -> None:
    worker = WorkerInfo.start(slots=4)
    check = await queue.renew_leases({}, worker=worker)
    assert not check.lost and not check.cancel_requested
    [shown] = await queue.list_workers()
    assert (shown.worker_id, shown.host, shown.pid, shown.version) == (
        worker.worker_id, worker.host, worker.pid, worker.version,
    )
    assert (shown.slots, shown.slots_in_use, shown.leases) == (4, 0, [])
    assert shown.started_at == shown.last_beat_at


async def test_slots_in_use_count_the_leases_the_beat_kept(queue: Queue, engine: AsyncEngine) -> None:
    worker = WorkerInfo.start(slots=3)
    await queue.renew_leases({}, worker=worker)
    first = (await by_id(queue))[worker.worker_id]
    for _ in range(2):
        await enqueue_demo(queue)
    claims = {c.run.id: c.lease_id for c in await queue.claim_batch(worker_id=worker.worker_id, limit=2)}
    lost = next(iter(claims))
    async with engine.begin() as conn:  # another claim took this run over
        await conn.execute(text("UPDATE agent_runs SET lease_id = gen_random_uuid() WHERE id = :id"), {"id": lost})

    check = await queue.renew_leases(claims, worker=worker)
    assert check.lost == {lost}
    shown = (await by_id(queue))[worker.worker_id]
    assert (shown.slots, shown.slots_in_use) == (3, 1)
    assert {lease["run_id"] for lease in shown.leases} == set(claims)  # the row's lease is still leased
    assert shown.started_at == first.started_at and shown.last_beat_at >= first.last_beat_at


async def test_leases_of_an_unregistered_worker_are_still_listed(queue: Queue) -> None:
    run = await enqueue_demo(queue)
    await queue.claim_batch(worker_id="old:1:aa", limit=1)
    [shown] = await queue.list_workers()
    assert dataclasses.replace(shown, leases=[]) == WorkerView(worker_id="old:1:aa")
    assert [lease["run_id"] for lease in shown.leases] == [run.id]


async def test_forget_and_reap_stale_workers(queue: Queue, engine: AsyncEngine) -> None:
    gone, stale, live = (WorkerInfo.start(slots=1) for _ in range(3))
    for worker in (gone, stale, live):
        await queue.renew_leases({}, worker=worker)
    await queue.forget_worker(gone.worker_id)
    assert set(await by_id(queue)) == {stale.worker_id, live.worker_id}

    async with engine.begin() as conn:  # stale: silent for longer than a lease (30 s here)
        await conn.execute(
            text("UPDATE workers SET last_beat_at = now() - interval '31 seconds' WHERE worker_id = :id"),
            {"id": stale.worker_id},
        )
    await queue.forget_stale_workers()
    assert set(await by_id(queue)) == {live.worker_id}

    await queue.renew_leases({}, worker=stale)  # it was only stalled: its next beat registers it again
    assert set(await by_id(queue)) == {stale.worker_id, live.worker_id}
