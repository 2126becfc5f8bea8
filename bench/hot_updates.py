"""HOT-update ratio of heartbeat renewals, with and without an index on ``locked_until``.

An index on a column a statement changes rules out a heap-only-tuple update: every heartbeat
would then write a new entry into every index of agent_runs. This measures both shapes on the
same database: one worker holding 64 runs, ``rounds`` batched renewals.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import WorkerInfo
from app.queue import Queue

SEED_INDEX = "CREATE INDEX ix_bench_locked_until ON agent_runs (locked_until) WHERE status = 'leased'"


async def _stats(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = (
            await conn.execute(
                text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agent_runs'")
            )
        ).one()
    return int(row[0]), int(row[1])


async def _settled_stats(engine: AsyncEngine, expected_updates: int, before: tuple[int, int]) -> tuple[int, int]:
    # Backends report their counters when idle (at most about a second later): wait for them.
    for _ in range(100):
        now = await _stats(engine)
        if now[0] - before[0] >= expected_updates:
            return now
        await asyncio.sleep(0.1)
    return now


async def heartbeat_hot_ratio(engine: AsyncEngine, *, runs: int = 64, rounds: int = 200) -> float:
    queue = Queue(engine, lease_s=30)
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE agent_runs CASCADE"))
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, input_json)"
                " SELECT 'bench', 'demo', 3, '{}' FROM generate_series(1, :n)"
            ),
            {"n": runs},
        )
    worker = WorkerInfo.start(slots=runs)
    claims = await queue.claim_batch(worker_id=worker.worker_id, limit=runs)
    leases = {c.run.id: c.lease_id for c in claims}
    before = await _stats(engine)
    for _ in range(rounds):
        await queue.renew_leases(leases, worker=worker)
    after = await _settled_stats(engine, runs * rounds, before)
    updates, hot = after[0] - before[0], after[1] - before[1]
    return hot / updates if updates else 0.0


async def compare(engine: AsyncEngine, *, rounds: int = 200) -> dict[str, Any]:
    """HOT ratio with the shipped schema, then with the seed's index on ``locked_until``."""
    shipped = await heartbeat_hot_ratio(engine, rounds=rounds)
    async with engine.begin() as conn:
        await conn.execute(text(SEED_INDEX))
    try:
        seed = await heartbeat_hot_ratio(engine, rounds=rounds)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("DROP INDEX ix_bench_locked_until"))
    return {"hot_ratio_shipped": shipped, "hot_ratio_locked_until_index": seed, "rounds": rounds, "runs": 64}
