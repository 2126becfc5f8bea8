"""Retention through the worker's reaper: a day's events dropped with their partition, the runs'
rows then purged in batches, never waiting on a lock, never touching pending or leased runs
however old they are."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import NewRun, Queue
from app.queue.partitions import partition_name
from app.worker.reaper import PURGE_BATCH, reap_once

DAY_S = 86400.0
OLD = PURGE_BATCH * 2 + 100  # three batches in one pass


async def count(engine: AsyncEngine, sql: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(sql))).scalar_one())


def purged_total() -> float:
    return REGISTRY.get_sample_value("runq_runs_purged_total") or 0.0


async def test_the_reaper_drops_an_expired_day_whole_and_purges_its_runs_in_batches(
    queue: Queue, engine: AsyncEngine
) -> None:
    day = (datetime.now(UTC) - timedelta(days=41)).date()
    assert await queue.create_event_partition(day)
    old_day = f"timestamptz '{day.isoformat()} 01:00+00'"
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, created_at, history_at, finished_at)"
                f" SELECT 'acme', 'demo', 3, (ARRAY['done', 'dead', 'cancelled'])[i % 3 + 1], {old_day}, {old_day},"
                f" {old_day} + interval '1 hour' FROM generate_series(1, :n) AS i"
            ),
            {"n": OLD},
        )
        await conn.execute(
            text(
                "INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)"
                " SELECT id, 1, 'run.queued', '{}', 0, history_at FROM agent_runs"
            )
        )
    recent, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await queue.request_cancel(recent.id, tenant_id="acme")
    old_pending, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    old_leased, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await queue.claim_batch(worker_id="w", limit=1)  # FIFO: takes old_pending
    async with engine.begin() as conn:  # both waiting or running since that day: in its partition
        await conn.execute(
            text(
                f"UPDATE agent_runs SET created_at = {old_day}, history_at = {old_day},"
                f" available_at = {old_day} WHERE id IN (:a, :b)"
            ),
            {"a": old_pending.id, "b": old_leased.id},
        )
    # An operator's long transaction holds one old row: the purge skips it, never waits.
    locker = await engine.connect()
    held = await locker.begin()
    await locker.execute(text("SELECT id FROM agent_runs WHERE status = 'done' LIMIT 1 FOR UPDATE"))
    try:
        before = purged_total()
        await asyncio.wait_for(reap_once(queue, retention_s=30 * DAY_S), timeout=30)
        assert purged_total() - before == OLD - 1
    finally:
        await held.rollback()
        await locker.close()

    # The day went whole; the two runs still going were moved to today first, events and all.
    assert partition_name(day) not in {p.name for p in await queue.event_partitions()}
    for run in (old_pending, old_leased):
        assert (await queue.read_events(run.id))[0].type == "run.queued"
    remaining = await count(engine, "SELECT count(*) FROM agent_runs WHERE finished_at < now() - interval '30 days'")
    assert remaining == 1  # the locked one, for the next pass
    assert await count(engine, "SELECT count(*) FROM agent_runs WHERE status IN ('pending', 'leased')") == 2
    assert (await queue.get_run(recent.id, tenant_id=None)).status.value == "cancelled"
    assert await count(engine, "SELECT count(*) FROM run_events e LEFT JOIN agent_runs r ON r.id = e.run_id WHERE r.id IS NULL") == 0

    await reap_once(queue, retention_s=30 * DAY_S)
    assert await count(engine, "SELECT count(*) FROM agent_runs WHERE finished_at < now() - interval '30 days'") == 0


async def test_no_retention_keeps_everything(queue: Queue, engine: AsyncEngine) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await queue.request_cancel(run.id, tenant_id="acme")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET finished_at = now() - interval '400 days'"))
    await reap_once(queue, retention_s=0)
    assert (await queue.get_run(run.id, tenant_id=None)).status.value == "cancelled"
