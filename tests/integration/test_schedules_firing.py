"""Schedules fired by real workers' reaper passes: one run per slot cluster-wide with three
workers, only the latest slot after downtime, nothing for paused or deleted schedules.

Time moves in SQL (a schedule's ``next_run_at`` is set back), not by waiting for slots.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cron import Timing
from app.domain import Schedule
from app.queue import Queue
from app.queue.schedules import slot_key
from tests.worker_support import in_process_worker, wait_until

WORKERS = 3


@contextlib.asynccontextmanager
async def workers(database_url: str) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(WORKERS):
            await stack.enter_async_context(in_process_worker(database_url, concurrency=2, reaper_s=0.05))
        yield


async def every(queue: Queue, seconds: float) -> Schedule:
    return await queue.create_schedule(
        tenant_id="t1", timing=Timing(cron=None, every_s=seconds).check(), agent="demo",
        input={"steps": 0}, budget={}, priority=0, max_attempts=1,
    )  # fmt: skip


async def set_due(engine: AsyncEngine, schedule_id: uuid.UUID, *, ago_s: float = 0.001) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE schedules SET next_run_at = now() - make_interval(secs => :ago) WHERE id = :id"),
            {"ago": ago_s, "id": schedule_id},
        )


async def runs_of(engine: AsyncEngine, schedule_id: uuid.UUID) -> list[str]:
    """The idempotency keys (slots) of the schedule's runs, oldest first."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT idempotency_key FROM agent_runs WHERE schedule_id = :id ORDER BY created_at"),
            {"id": schedule_id},
        )
        return [r[0] for r in rows]


async def test_three_workers_make_exactly_one_run_per_slot(database_url: str, queue: Queue, engine: AsyncEngine) -> None:
    schedule = await every(queue, 1)
    async with workers(database_url):
        for slot in range(1, 21):
            await set_due(engine, schedule.id)  # the next slot has come
            await wait_until(lambda n=slot: _at_least(engine, schedule.id, n), within=15, what=f"slot {slot}")
        await queue.set_schedule_paused(schedule.id, tenant_id=None, paused=True)
    keys = await runs_of(engine, schedule.id)
    assert len(keys) == 20 and len(set(keys)) == 20
    latest = await queue.get_schedule(schedule.id, tenant_id=None)
    async with engine.connect() as conn:
        newest = (await conn.execute(text("SELECT id FROM agent_runs WHERE idempotency_key = :k"), {"k": keys[-1]})).scalar()
    assert latest.last_run_id == newest
    run = await queue.get_run(newest, tenant_id=None)
    assert (run.schedule_id, run.agent, run.input) == (schedule.id, "demo", {"steps": 0})


async def _at_least(engine: AsyncEngine, schedule_id: uuid.UUID, n: int) -> bool:
    return len(await runs_of(engine, schedule_id)) >= n


async def test_after_a_downtime_of_five_slots_one_run_for_the_latest(
    database_url: str, queue: Queue, engine: AsyncEngine
) -> None:
    schedule = await every(queue, 60)
    await set_due(engine, schedule.id, ago_s=270)  # slots at -4.5 ... -0.5 min missed
    missed_from = (await queue.get_schedule(schedule.id, tenant_id=None)).next_run_at
    async with workers(database_url):
        keys = await wait_until(lambda: runs_of(engine, schedule.id), within=15, what="the catch-up run")
        after = await queue.get_schedule(schedule.id, tenant_id=None)
    assert keys == [slot_key(schedule.id, missed_from + timedelta(minutes=4))]
    assert after.next_run_at == missed_from + timedelta(minutes=5)  # in the future: nothing else is due
    assert await runs_of(engine, schedule.id) == keys


async def test_paused_and_deleted_schedules_make_no_runs(database_url: str, queue: Queue, engine: AsyncEngine) -> None:
    paused, deleted, witness = await every(queue, 1), await every(queue, 1), await every(queue, 3600)
    for schedule in (paused, deleted, witness):
        await set_due(engine, schedule.id, ago_s=10)
    await queue.set_schedule_paused(paused.id, tenant_id=None, paused=True)
    await queue.delete_schedule(deleted.id, tenant_id=None)
    async with workers(database_url):
        # one reaper pass takes every due schedule: once the witness fired, the others were seen
        await wait_until(lambda: runs_of(engine, witness.id), within=15, what="the witness schedule")
        assert await runs_of(engine, paused.id) == [] and await runs_of(engine, deleted.id) == []
        resumed = await queue.set_schedule_paused(paused.id, tenant_id=None, paused=False)
        # The paused slots are not made up: the next slot is the first after the resume, by the
        # resume's own clock (updated_at is its transaction's now()). A now() read afterwards
        # may already be past a slot of a one-second schedule.
        resumed_at = resumed.updated_at
        assert resumed_at < resumed.next_run_at <= resumed_at + timedelta(seconds=1)


async def test_a_slot_fired_twice_makes_one_run(queue: Queue, engine: AsyncEngine) -> None:
    """As after a crash between creating the run and moving the schedule on: the slot's key
    is taken, so the repeat inserts nothing and only moves the schedule."""
    schedule = await every(queue, 60)
    await set_due(engine, schedule.id, ago_s=1)
    slot = (await queue.get_schedule(schedule.id, tenant_id=None)).next_run_at
    ((_, run_id),) = (await queue.fire_due_schedules()).runs
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE schedules SET next_run_at = :slot WHERE id = :id"), {"slot": slot, "id": schedule.id})
    assert (await queue.fire_due_schedules()).runs == []
    assert await runs_of(engine, schedule.id) == [slot_key(schedule.id, slot)]
    after = await queue.get_schedule(schedule.id, tenant_id=None)
    assert after.last_run_id == run_id and after.next_run_at == slot + timedelta(seconds=60)


async def test_the_reaper_wakes_for_a_slot_before_its_next_pass(database_url: str, queue: Queue, engine: AsyncEngine) -> None:
    """Second-level schedules do not wait for RUNQ_REAPER_S: the pass sleeps until the next slot."""
    schedule = await every(queue, 1)
    async with in_process_worker(database_url, concurrency=1, reaper_s=60):
        await wait_until(lambda: _at_least(engine, schedule.id, 2), within=20, what="two slots a second apart")


async def test_a_thread_schedule_queues_its_runs_in_the_thread(queue: Queue, engine: AsyncEngine) -> None:
    thread, _ = await queue.create_thread(tenant_id="t1", metadata={})
    gone, _ = await queue.create_thread(tenant_id="t1", metadata={})
    timing = Timing(cron=None, every_s=60).check()
    fields = {"tenant_id": "t1", "timing": timing, "agent": "demo", "input": {}, "budget": {}, "priority": 0, "max_attempts": 1}
    first, second = [await queue.create_schedule(**fields, thread_id=thread.id) for _ in range(2)]  # type: ignore[arg-type]
    orphan = await queue.create_schedule(**fields, thread_id=gone.id)  # type: ignore[arg-type]
    plain = await queue.create_schedule(**fields)  # type: ignore[arg-type]
    await queue.delete_thread(gone.id, tenant_id="t1")
    for schedule in (first, second, orphan, plain):
        await set_due(engine, schedule.id)
    fired = dict((await queue.fire_due_schedules()).runs)
    assert set(fired) == {first.id, second.id, plain.id}  # a deleted thread takes no run, the rest fire
    turns = [turn for turn, _ in await queue.list_thread_runs(thread.id, tenant_id="t1")]
    assert turns == [2, 1]
    assert (await queue.get_run(fired[plain.id], tenant_id="t1")).thread_id is None
    # the next run of the thread waits for the first one's turn, as any enqueued run
    claims = await queue.claim_batch(worker_id="w1", limit=10)
    assert {c.run.id for c in claims} == {fired[plain.id], (await queue.list_thread_runs(thread.id, tenant_id="t1"))[1][1].id}
