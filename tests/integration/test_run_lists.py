"""The lists of runs without leased runs in their indexes (migration 0021, docs/schema.md).

``ix_agent_runs_created``, ``ix_agent_runs_tenant_created`` and ``ix_agent_runs_unfinished``
leave leased runs out, so a claim adds no entry to them; what reads them reads the leased runs
through ``ix_agent_runs_leased``. Every page still holds every run once, newest first, and every
read of a page goes through an index, whatever the filter.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Run, Status
from app.queue import NewRun, Queue
from app.queue.codec import page_params
from app.queue.partitions import (
    COUNT_PURGEABLE,
    PARTITION_HAS_UNFINISHED_RUNS,
    PURGE_FINISHED,
    REHOME_UNFINISHED_RUNS,
)
from app.queue.runs import LIST_RUNS

LIST_INDEXES = {"ix_agent_runs_created", "ix_agent_runs_tenant_created", "ix_agent_runs_unfinished"}
LEASE = (
    "lease_id = gen_random_uuid(), locked_by = 'w', locked_until = now() + interval '30 seconds',"
    " leased_at = now(), heartbeat_at = now(), attempts = 1"
)


async def insert_runs(engine: AsyncEngine, rows: list[tuple[str, Status, datetime]]) -> None:
    """Runs of these tenants, statuses and creation times (the leased ones with a lease)."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, created_at, history_at)"
                " SELECT t, 'demo', 3, s, c, c FROM unnest(CAST(:tenants AS text[]), CAST(:statuses AS text[]),"
                " CAST(:created AS timestamptz[])) AS x(t, s, c)"
            ),
            {
                "tenants": [t for t, _, _ in rows],
                "statuses": [s.value for _, s, _ in rows],
                "created": [c for *_, c in rows],
            },
        )
        await conn.execute(text(f"UPDATE agent_runs SET {LEASE} WHERE status = 'leased'"))
        await conn.execute(text("UPDATE agent_runs SET finished_at = now() WHERE status IN ('done', 'dead', 'cancelled')"))


async def every_page(queue: Queue, *, tenant_id: str | None, status: Status | None, limit: int) -> list[Run]:
    """The list read page by page, each after the keyset cursor of the one before."""
    runs: list[Run] = []
    before = None
    while True:
        page = await queue.list_runs(tenant_id=tenant_id, status=status, limit=limit, before=before)
        runs += page
        if len(page) < limit:
            return runs
        before = (page[-1].created_at, page[-1].id)


async def newest_first(engine: AsyncEngine, *, tenant_id: str | None, status: Status | None) -> list[uuid.UUID]:
    """The runs the list should show, by one plain query."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id FROM agent_runs WHERE (CAST(:tenant AS text) IS NULL OR tenant_id = :tenant)"
                " AND (CAST(:status AS text) IS NULL OR status = :status) ORDER BY created_at DESC, id DESC"
            ),
            {"tenant": tenant_id, "status": status.value if status else None},
        )
        return [r.id for r in rows]


OTHERS = [Status.PENDING, Status.WAITING, Status.DONE, Status.DEAD, Status.CANCELLED]


@pytest.mark.parametrize("tenant_id", ["acme", None])
@pytest.mark.parametrize("status", [None, Status.LEASED, Status.PENDING, Status.DONE])
async def test_every_page_holds_each_run_once_newest_first_across_leased_runs(
    queue: Queue, engine: AsyncEngine, tenant_id: str | None, status: Status | None
) -> None:
    start = datetime.now(UTC)
    rows = []
    for k in range(240):
        # a run of 16 leased runs in a row fills whole pages; others leased here and there;
        # three runs share each creation time, so pages end inside ties of created_at
        leased = 40 <= k < 56 or k % 7 == 0
        status_k = Status.LEASED if leased else OTHERS[k % 5]
        rows.append(("acme" if k % 3 else "globex", status_k, start - timedelta(seconds=k // 3)))
    await insert_runs(engine, rows)

    expected = await newest_first(engine, tenant_id=tenant_id, status=status)
    assert expected  # every combination lists something
    for limit in (1, 7, 50):
        listed = await every_page(queue, tenant_id=tenant_id, status=status, limit=limit)
        assert [r.id for r in listed] == expected, limit
    assert all(r.status is (status or r.status) and r.tenant_id == (tenant_id or r.tenant_id) for r in listed)


async def test_a_claimed_run_is_in_the_primary_key_and_the_leased_index_only(
    queue: Queue, engine: AsyncEngine
) -> None:
    """A claim's update is never HOT (status is in index predicates): PostgreSQL adds an entry
    for the new row to every index whose predicate it meets, now two of them."""
    for _ in range(2):
        await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w", limit=1)
    (pending,) = await queue.list_runs(tenant_id="acme", status=Status.PENDING)

    assert await indexes_holding(engine, claim.run.id) == {"pk_agent_runs", "ix_agent_runs_leased"}
    assert await indexes_holding(engine, pending.id) >= LIST_INDEXES | {"ix_agent_runs_claim"}


async def indexes_holding(engine: AsyncEngine, run_id: uuid.UUID) -> set[str]:
    """The indexes of agent_runs whose predicate the run's row meets (all of them with none)."""
    async with engine.connect() as conn:
        indexes = await conn.execute(
            text(
                "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = CAST('agent_runs' AS regclass)"
            )
        )
        held = set()
        for name, predicate in indexes.all():
            query = text(f"SELECT {predicate or 'true'} FROM agent_runs WHERE id = :id")
            if (await conn.execute(query, {"id": run_id})).scalar_one():
                held.add(name)
        return held


async def explain(engine: AsyncEngine, sql: str, params: dict[str, object], *, ran: bool = False) -> str:
    """The statement's plan; ``ran``: as run (EXPLAIN ANALYZE, rolled back), without the nodes
    that never ran (a side of the list that the status filter rules out)."""
    options = "ANALYZE, COSTS OFF, TIMING OFF" if ran else "COSTS OFF"
    async with engine.connect() as conn:
        lines = [r[0] for r in await conn.execute(text(f"EXPLAIN ({options}) {sql}"), params)]
        await conn.rollback()
    return "\n".join(line for line in lines if "never executed" not in line)


async def test_lists_and_maintenance_read_indexes_never_the_whole_table(engine: AsyncEngine) -> None:
    """20,000 runs of 20 tenants over ten days, 200 of them leased: each page, the re-homing
    and the partition drop's check read indexes, the leased runs through theirs; the purge still
    picks its finished runs from a list index."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, created_at, history_at, finished_at)"
                " SELECT 't' || (i / 7 % 20), 'demo', 3, s, now() - make_interval(secs => i * 43),"
                " now() - make_interval(secs => i * 43),"
                " CASE WHEN s IN ('done', 'dead', 'cancelled') THEN now() - make_interval(secs => i * 43) END"
                " FROM generate_series(1, 20000) AS i CROSS JOIN LATERAL (SELECT CASE WHEN i % 100 = 3 THEN 'leased'"
                " WHEN i % 20 = 1 THEN 'pending' WHEN i % 50 = 7 THEN 'waiting' ELSE 'done' END AS s) AS x"
            )
        )
        await conn.execute(text(f"UPDATE agent_runs SET {LEASE} WHERE status = 'leased'"))
        await conn.execute(text("ANALYZE agent_runs"))
        middle = "SELECT created_at, id FROM agent_runs ORDER BY created_at DESC OFFSET 5000 LIMIT 1"
        deep = (await conn.execute(text(middle))).one()

    for tenant_id in ("t7", None):
        for status in (None, "leased", "pending", "done"):
            for before in (None, (deep.created_at, deep.id)):
                params = {"tenant_id": tenant_id, "status": status, **page_params(before, 51)}
                plan = await explain(engine, LIST_RUNS.text, params, ran=True)
                assert "Seq Scan on agent_runs" not in plan, plan
                if status in (None, "leased"):
                    assert "ix_agent_runs_leased" in plan, plan
                if status is None:  # the other runs: an ordered walk of a list index
                    assert re.search(r"Index Scan using ix_agent_runs_(tenant_)?created on", plan), plan

    day_ago = datetime.now(UTC) - timedelta(days=5)
    statements = [
        (REHOME_UNFINISHED_RUNS.text, {"grace_s": 86400.0, "batch": 100}),
        (PARTITION_HAS_UNFINISHED_RUNS.text, {"lo": day_ago - timedelta(days=1), "hi": day_ago}),
        (PARTITION_HAS_UNFINISHED_RUNS.text, {"lo": None, "hi": day_ago}),
    ]
    for sql, params in statements:
        plan = await explain(engine, sql, params)
        assert "Seq Scan on agent_runs" not in plan, plan
        assert "ix_agent_runs_unfinished" in plan and "ix_agent_runs_leased" in plan, plan
    far = datetime(2100, 1, 1, tzinfo=UTC)
    for sql in (PURGE_FINISHED.text, COUNT_PURGEABLE.text):  # finished runs only: never leased
        plan = await explain(engine, sql, {"older_than_s": 3 * 86400.0, "batch": 500, "before": far})
        assert re.search(r"Index Scan (Backward )?using ix_agent_runs_(created|finished) on", plan), plan
