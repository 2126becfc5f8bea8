"""Retention through the worker's reaper: batched, never waiting on a lock, never touching
pending or leased runs however old they are."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from app.worker.reaper import PURGE_BATCH, reap_once

DAY_S = 86400.0
OLD = PURGE_BATCH * 2 + 100  # three batches in one pass


async def count(engine: AsyncEngine, sql: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(sql))).scalar_one())


def purged_total() -> float:
    return REGISTRY.get_sample_value("runq_runs_purged_total") or 0.0


async def test_the_reaper_purges_old_finished_runs_in_batches(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, finished_at, created_at)"
                " SELECT 'acme', 'demo', 3, (ARRAY['done', 'dead', 'cancelled'])[i % 3 + 1],"
                " now() - interval '40 days', now() - interval '41 days' FROM generate_series(1, :n) AS i"
            ),
            {"n": OLD},
        )
        await conn.execute(
            text("INSERT INTO run_events (run_id, seq, type, data, attempt) SELECT id, 1, 'run.queued', '{}', 0 FROM agent_runs")
        )
    recent, _ = await queue.enqueue(tenant_id="acme", agent="demo", input={})
    await queue.request_cancel(recent.id, tenant_id="acme")
    old_pending, _ = await queue.enqueue(tenant_id="acme", agent="demo", input={})
    old_leased, _ = await queue.enqueue(tenant_id="acme", agent="demo", input={})
    await queue.claim_batch(worker_id="w", limit=1)  # FIFO: takes old_pending
    async with engine.begin() as conn:  # both waiting or running for 40 days
        await conn.execute(
            text(
                "UPDATE agent_runs SET created_at = now() - interval '40 days',"
                " available_at = now() - interval '40 days' WHERE id IN (:a, :b)"
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

    remaining = await count(engine, "SELECT count(*) FROM agent_runs WHERE finished_at < now() - interval '30 days'")
    assert remaining == 1  # the locked one, for the next pass
    assert await count(engine, "SELECT count(*) FROM agent_runs WHERE status IN ('pending', 'leased')") == 2
    assert (await queue.get_run(recent.id, tenant_id=None)).status.value == "cancelled"
    assert await count(engine, "SELECT count(*) FROM run_events e LEFT JOIN agent_runs r ON r.id = e.run_id WHERE r.id IS NULL") == 0

    await reap_once(queue, retention_s=30 * DAY_S)
    assert await count(engine, "SELECT count(*) FROM agent_runs WHERE finished_at < now() - interval '30 days'") == 0


async def test_no_retention_keeps_everything(queue: Queue, engine: AsyncEngine) -> None:
    run, _ = await queue.enqueue(tenant_id="acme", agent="demo", input={})
    await queue.request_cancel(run.id, tenant_id="acme")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET finished_at = now() - interval '400 days'"))
    await reap_once(queue, retention_s=0)
    assert (await queue.get_run(run.id, tenant_id=None)).status.value == "cancelled"
