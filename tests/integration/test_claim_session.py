"""A worker's claim session (``app.db.engine.worker_engines``): its claims are planned once, on a
generic plan, and the process holds no more connections than ``RUNQ_DB_POOL_SIZE`` says. On
PostgreSQL itself, with prepared statements, whether or not the suite runs behind PgBouncer."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import worker_engines
from app.queue import NewRun, Queue
from app.settings import Settings


def test_the_claim_session_is_set_aside_from_the_pool_unless_no_plan_is_kept_or_the_pool_is_one() -> None:
    url = "postgresql://runq@127.0.0.1:5432/runq"
    pool, claims = worker_engines(url, Settings(database_url=url, db_pool_size=4, db_prepared_statements=True))
    assert claims is not None and (pool.pool.size(), claims.pool.size()) == (3, 1)  # type: ignore[attr-defined]
    for settings in (
        Settings(database_url=url, db_pool_size=4, db_prepared_statements=False),  # behind a pooler
        Settings(database_url=url, db_pool_size=1, db_prepared_statements=True),
    ):
        pool, claims = worker_engines(url, settings)
        assert claims is None and pool.pool.size() == settings.db_pool_size  # type: ignore[attr-defined]


async def test_claims_on_the_claim_session_run_on_one_generic_plan(direct_database_url: str, engine: AsyncEngine) -> None:
    pool, claims = worker_engines(direct_database_url, Settings(database_url=direct_database_url, db_pool_size=2, db_prepared_statements=True))
    assert claims is not None
    queue = Queue(pool, claim_engine=claims)
    try:
        await queue.enqueue_many(tenant_id="acme", agent="demo", inputs=[{}] * 20)
        taken = [len(await queue.claim_batch(worker_id="w1", limit=2)) for _ in range(8)]
        async with claims.connect() as conn:  # the session's own prepared statements
            mode = (await conn.execute(text("SHOW plan_cache_mode"))).scalar_one()
            plans = (
                await conn.execute(
                    text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH picked AS%'")
                )
            ).all()
    finally:
        await pool.dispose()
        await claims.dispose()
    assert taken == [2] * 8
    assert mode == "force_generic_plan"
    assert [(row.generic_plans, row.custom_plans) for row in plans] == [(8, 0)]


async def test_a_run_claimed_on_the_claim_session_is_the_one_at_the_head_of_the_queue(
    direct_database_url: str, engine: AsyncEngine
) -> None:
    pool, claims = worker_engines(direct_database_url, Settings(database_url=direct_database_url, db_pool_size=2, db_prepared_statements=True))
    queue = Queue(pool, claim_engine=claims)
    try:
        low, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, priority=0))
        high, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, priority=5))
        (first,) = await queue.claim_batch(worker_id="w1", limit=1)
        (second,) = await queue.claim_batch(worker_id="w1", limit=1)
    finally:
        await pool.dispose()
        if claims is not None:
            await claims.dispose()
    assert (first.run.id, second.run.id) == (high.id, low.id)
