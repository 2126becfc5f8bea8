"""A bad row costs the reaper's other rows and steps nothing (docs/reliability.md).

A run whose change PostgreSQL refuses (a trigger stands in for whatever a real row could hold)
sits in each batched step — expired leases, timed-out waits, abandoned runs — beside good ones:
the good ones are changed as if alone, the bad one is skipped and counted in
``runq_maintenance_errors_total{step}``, and a step that fails whole never stops the steps after it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Finish, Status, Wait
from app.metrics import MAINTENANCE_ERRORS
from app.queue import NewRun, Queue
from app.worker.reaper import reap_once

Refuse = Callable[[uuid.UUID], Awaitable[None]]


@pytest.fixture
async def refuse_updates_of(engine: AsyncEngine) -> AsyncIterator[Refuse]:
    """Makes PostgreSQL refuse every update of one run's row (SQLSTATE 22023), for one test."""

    async def refuse(run_id: uuid.UUID) -> None:
        async with engine.begin() as conn:
            await conn.execute(text(
                "CREATE OR REPLACE FUNCTION test_refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN RAISE EXCEPTION 'a row the reaper cannot change' USING ERRCODE = '22023'; END $$"
            ))
            await conn.execute(text(
                "CREATE TRIGGER test_refuse_row BEFORE UPDATE ON agent_runs FOR EACH ROW"
                f" WHEN (OLD.id = '{run_id}') EXECUTE FUNCTION test_refuse_row()"
            ))

    yield refuse
    async with engine.begin() as conn:
        await conn.execute(text("DROP TRIGGER IF EXISTS test_refuse_row ON agent_runs"))
        await conn.execute(text("DROP FUNCTION IF EXISTS test_refuse_row()"))


def errors(step: str) -> float:
    return MAINTENANCE_ERRORS.labels(step=step)._value.get()


async def enqueue(queue: Queue, n: int, **fields: object) -> list[uuid.UUID]:
    return [(await queue.enqueue(NewRun(tenant_id=f"t{i}", agent="demo", input={}, **fields)))[0].id  # type: ignore[arg-type]
            for i in range(n)]


async def test_expired_leases_are_requeued_but_the_one_that_fails(
    queue: Queue, engine: AsyncEngine, refuse_updates_of: Refuse
) -> None:
    ids = await enqueue(queue, 5)
    await queue.claim_batch(worker_id="w", limit=5)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET locked_until = now() - interval '1 second'"))
    await refuse_updates_of(ids[2])
    before = errors("expired_leases")
    reaped = await queue.reap_expired()
    assert sorted(r.id for r in reaped) == sorted(ids[:2] + ids[3:])
    assert all(r.status is Status.PENDING for r in reaped)
    assert (await queue.get_run(ids[2], tenant_id=None)).status is Status.LEASED
    assert errors("expired_leases") == before + 1


async def test_timed_out_waits_are_resumed_but_the_one_that_fails(
    queue: Queue, engine: AsyncEngine, refuse_updates_of: Refuse
) -> None:
    ids = await enqueue(queue, 4)
    for claim in await queue.claim_batch(worker_id="w", limit=4):
        wait = Wait(name="approval", occurrence=1, timeout_s=3600)
        await queue.finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=Finish.waiting(wait))
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE waitpoints SET expires_at = now() - interval '1 second'"))
    await refuse_updates_of(ids[0])
    before = errors("wait_timeouts")
    resumed = await queue.resume_expired_waits()
    assert sorted(r.run.id for r in resumed) == sorted(ids[1:])
    assert (await queue.get_run(ids[0], tenant_id=None)).status is Status.WAITING
    assert errors("wait_timeouts") == before + 1


async def test_abandoned_runs_are_cancelled_but_the_one_that_fails(
    queue: Queue, engine: AsyncEngine, refuse_updates_of: Refuse
) -> None:
    ids = await enqueue(queue, 4, on_disconnect="cancel", disconnect_grace_s=1.0)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET created_at = now() - interval '1 minute'"))
    await refuse_updates_of(ids[3])
    before = errors("abandoned_runs")
    cancelled = await queue.cancel_abandoned()
    assert sorted(r.id for r in cancelled) == sorted(ids[:3])
    assert all(r.status is Status.CANCELLED for r in cancelled)
    assert (await queue.get_run(ids[3], tenant_id=None)).status is Status.PENDING
    assert errors("abandoned_runs") == before + 1


async def test_a_step_that_fails_stops_none_of_the_others(
    queue: Queue, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    [expired] = await enqueue(queue, 1)
    await queue.claim_batch(worker_id="w", limit=1)
    [abandoned] = await enqueue(queue, 1, on_disconnect="cancel", disconnect_grace_s=1.0)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET locked_until = now() - interval '1 second', "
                                "created_at = now() - interval '1 minute'"))

    async def broken(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("a step that fails whole")

    monkeypatch.setattr(queue, "reap_expired", broken)  # the first step
    monkeypatch.setattr(queue, "resume_expired_waits", broken)
    before = errors("expired_leases")
    await reap_once(queue, retention_s=0)
    assert errors("expired_leases") == before + 1
    assert (await queue.get_run(abandoned, tenant_id=None)).status is Status.CANCELLED  # a later step ran
    assert (await queue.get_run(expired, tenant_id=None)).status is Status.LEASED
