"""The webhook outbox at the queue layer (docs/webhooks.md): every way a run reaches an event its
webhook asked for writes one delivery row, in the statement of the event; a run without a
webhook, or an event it did not ask for, writes none; moving a run's history announces nothing
again."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Claim, Finish, Status, Wait
from app.queue import NewRun, Queue

ANNOUNCED = ("run.completed", "run.failed", "run.cancelled", "run.waiting")
HOOK = {"url": "https://hooks.example/runq", "events": list(ANNOUNCED)}
WAIT = Wait(name="approval", occurrence=1, payload={}, timeout_s=60.0)


async def outbox(engine: AsyncEngine, run_id: uuid.UUID) -> list[tuple[int, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT event_seq, event_type FROM webhook_deliveries WHERE run_id = :id ORDER BY event_seq"
            ),
            {"id": run_id},
        )
        return [(seq, kind) for seq, kind in rows]


async def announced(queue: Queue, run_id: uuid.UUID) -> list[tuple[int, str]]:
    return [(e.seq, e.type) for e in await queue.read_events(run_id) if e.type in ANNOUNCED]


async def claimed(queue: Queue) -> Claim:
    (claim,) = await queue.claim_batch(worker_id="w1", limit=1)
    return claim


async def finish_with(queue: Queue, finish: Finish) -> None:
    claim = await claimed(queue)
    await queue.finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=finish)


async def reaped_dead(queue: Queue, engine: AsyncEngine) -> None:
    await claimed(queue)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET locked_until = now() - interval '1 second'"))
    assert [r.status for r in await queue.reap_expired()] == [Status.DEAD]


async def cancelled_while_leased(queue: Queue, run_id: uuid.UUID) -> None:
    claim = await claimed(queue)
    await queue.request_cancel(run_id, tenant_id="acme")
    await queue.finish(run_id=run_id, lease_id=claim.lease_id, finish=Finish.cancelled())


Ending = Callable[[Queue, AsyncEngine, uuid.UUID], Awaitable[None]]
ENDINGS: dict[str, tuple[Ending, Status]] = {
    "done": (lambda q, e, r: finish_with(q, Finish.done({"ok": True})), Status.DONE),
    "dead by the worker": (lambda q, e, r: finish_with(q, Finish.dead("bad", "no")), Status.DEAD),
    "dead by the reaper": (lambda q, e, r: reaped_dead(q, e), Status.DEAD),
    "cancelled while pending": (
        lambda q, e, r: q.request_cancel(r, tenant_id="acme"),
        Status.CANCELLED,
    ),
    "cancelled while leased": (lambda q, e, r: cancelled_while_leased(q, r), Status.CANCELLED),
    "waiting": (lambda q, e, r: finish_with(q, Finish.waiting(WAIT)), Status.WAITING),
}


@pytest.mark.parametrize("ending", ENDINGS)
async def test_every_ending_writes_its_delivery_once(
    queue: Queue, engine: AsyncEngine, ending: str
) -> None:
    run, _ = await queue.enqueue(NewRun(
        tenant_id="acme", agent="demo", input={}, webhook=HOOK, max_attempts=1)
    )
    end, status = ENDINGS[ending]
    await end(queue, engine, run.id)
    assert (await queue.get_run(run.id, tenant_id=None)).status is status
    written = await outbox(engine, run.id)
    assert len(written) == 1 and written == await announced(queue, run.id)


async def test_no_webhook_or_an_event_not_asked_for_writes_nothing(
    queue: Queue, engine: AsyncEngine
) -> None:
    plain, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await finish_with(queue, Finish.done({}))
    picky, _ = await queue.enqueue(NewRun(
        tenant_id="acme", agent="demo", input={}, webhook=HOOK | {"events": ["run.completed"]})
    )
    await queue.request_cancel(picky.id, tenant_id="acme")
    assert await outbox(engine, plain.id) == [] and await outbox(engine, picky.id) == []


async def test_moving_a_runs_history_announces_nothing_again(
    queue: Queue, engine: AsyncEngine
) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, webhook=HOOK))
    await queue.request_cancel(run.id, tenant_id="acme")
    async with engine.begin() as conn:  # the reaper's re-homing, by hand
        await conn.execute(
            text(
                "UPDATE agent_runs SET history_at = history_at - interval '2 days' WHERE id = :id"
            ),
            {"id": run.id},
        )
    await queue.requeue(run.id)  # moves the history back to today, with a run.queued
    await queue.request_cancel(run.id, tenant_id="acme")
    written = await outbox(engine, run.id)
    assert [kind for _, kind in written] == ["run.cancelled", "run.cancelled"]
    assert written == await announced(queue, run.id)
