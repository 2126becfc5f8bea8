"""Fairness with many runs: in-flight caps and priority aging, and the claim's plan.

Each "claim round" is one ``claim_batch`` call of a worker with free slots, as the claim loop
makes it; finished work is completed between rounds. Time is moved in SQL (every pending
row's timestamps shifted back), never slept away.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Claim, Finish
from app.queue import CLAIM_BATCH, CLAIM_BATCH_CAPPED, Ended, Queue

BACKLOG = 10_000
SLOTS = 16


async def backlog(queue: Queue, tenant_id: str, n: int, *, priority: int = 0) -> list[uuid.UUID]:
    return await queue.enqueue_many(
        tenant_id=tenant_id, agent="demo", inputs=[{}] * n, priority=priority
    )


async def complete_all(queue: Queue, claims: list[Claim]) -> None:
    await queue.finish_many([Ended.encoded(c.run.id, c.lease_id, Finish.done(None)) for c in claims])


async def pass_time(engine: AsyncEngine, seconds: float) -> None:
    """As if ``seconds`` went by for every waiting run (``now()`` itself cannot move)."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE agent_runs SET available_at = available_at - CAST(:d AS interval),"
                " queue_rank = queue_rank - CAST(:d AS interval),"
                " created_at = created_at - CAST(:d AS interval) WHERE status = 'pending'"
            ),
            {"d": timedelta(seconds=seconds)},
        )


async def test_a_backlog_at_its_cap_does_not_delay_another_tenants_first_run(queue: Queue) -> None:
    queue.tenant_max_inflight = 4
    await backlog(queue, "big", BACKLOG)
    first = await queue.claim_batch(worker_id="w", limit=SLOTS)
    assert {c.run.tenant_id for c in first} == {"big"} and len(first) == 4

    (small,) = await backlog(queue, "small", 1)
    second = await queue.claim_batch(worker_id="w", limit=SLOTS)
    assert small in {c.run.id for c in second}


async def test_a_backlog_whose_runs_finish_fast_cannot_starve_late_tenants(queue: Queue) -> None:
    # The hard case: the big tenant's runs end between rounds, so it is below its cap at every
    # claim, and its backlog fills every window of candidates the claim looks at.
    queue.tenant_max_inflight = 4
    await backlog(queue, "big", BACKLOG)
    for round_ in range(5):
        (late,) = await backlog(queue, f"late-{round_}", 1, priority=-5)
        claims = await queue.claim_batch(worker_id="w", limit=SLOTS)
        assert late in {c.run.id for c in claims}, f"round {round_}"
        assert sum(c.run.tenant_id == "big" for c in claims) == 4
        await complete_all(queue, claims)


async def test_priority_aging_bounds_the_wait_behind_an_endless_stream(
    queue: Queue, engine: AsyncEngine
) -> None:
    """High-priority runs keep arriving faster than they are claimed; the low one still goes.

    It waits for exactly the runs that outrank it: those that arrived within
    ``priority difference * RUNQ_PRIORITY_AGING_S`` after it, drained at the claim rate.
    """
    queue.aging_s = 60.0
    tick_s, arrivals, slots, delta = 10.0, 25, 20, 5
    (low,) = await backlog(queue, "low", 1, priority=0)
    bound_s = delta * queue.aging_s * arrivals / slots + tick_s
    elapsed = 0.0
    while True:
        await backlog(queue, "high", arrivals, priority=delta)
        claims = await queue.claim_batch(worker_id="w", limit=slots)
        await complete_all(queue, claims)
        if low in {c.run.id for c in claims}:
            break
        await pass_time(engine, tick_s)
        elapsed += tick_s
        assert elapsed <= bound_s, "the low-priority run is still waiting"
    assert elapsed >= delta * queue.aging_s  # until then every high run outranks it
    assert (await queue.queue_depth()).pending > 0  # and the stream never ran dry


async def explain(engine: AsyncEngine, statement: TextClause, params: dict[str, object]) -> str:
    async with engine.begin() as conn:
        rows = await conn.execute(text(f"EXPLAIN {statement.text}"), params)
        return "\n".join(r[0] for r in rows)


async def test_claims_use_the_partial_index_with_much_history(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, finished_at)"
                " SELECT 't' || (i % 50), 'demo', 3, (ARRAY['done', 'dead', 'cancelled'])[i % 3 + 1], now()"
                " FROM generate_series(1, 50000) AS i"
            )
        )
    for tenant in ("a", "b", "c"):
        await backlog(queue, tenant, 100)
    await queue.claim_batch(worker_id="w", limit=10)
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE agent_runs"))

    claim = {"worker_id": "w", "limit": 10, "lease_s": 30.0}
    capped = claim | {"default_cap": 4, "scan": 80}
    for statement, params in ((CLAIM_BATCH, claim), (CLAIM_BATCH_CAPPED, capped)):
        plan = await explain(engine, statement, params)
        assert "ix_agent_runs_claim" in plan, plan
        assert "Seq Scan on agent_runs" not in plan, plan
    # The capped claim counts in-flight runs through the partial index of leased rows.
    assert "ix_agent_runs_leased" in await explain(engine, CLAIM_BATCH_CAPPED, capped)
