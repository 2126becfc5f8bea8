"""Waits at the queue layer (docs/waits.md): the waiting ending is fenced like every other, a
holder from before the wait writes nothing after the resume, and the webhook outbox announces
``run.waiting`` to a subscriber."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Finish, Status, Strategy, Wait
from app.errors import LeaseLost, NotWaiting, RunNotFound, ThreadBusy
from app.queue import Appended, NewRun, Queue
from app.queue.statements import statement
from tests.worker_support import check_event_log


def a_wait(**fields: object) -> Wait:
    return Wait(**({"name": "approval", "occurrence": 1, "payload": {"q": "ok?"}, "timeout_s": 60.0} | fields))  # type: ignore[arg-type]


async def test_zombie_from_before_the_wait_writes_nothing_after_the_resume(queue: Queue) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    (before,) = await queue.claim_batch(worker_id="w1", limit=1)
    wait = a_wait(checkpoint={"state": {"step": 1}, "waits": {}})
    waited = await queue.finish(
        run_id=run.id, lease_id=before.lease_id, finish=Finish.waiting(wait), events=[("tool.call", {"n": 1})]
    )
    assert waited.status is Status.WAITING

    # A second holder of the same old claim (the zombie) cannot write while it waits ...
    with pytest.raises(LeaseLost):
        await queue.append_events(run_id=run.id, lease_id=before.lease_id, events=[("message.delta", {"text": "x"})])
    with pytest.raises(LeaseLost):
        await queue.finish(run_id=run.id, lease_id=before.lease_id, finish=Finish.waiting(a_wait(occurrence=2)))

    resumed = await queue.resume(run.id, tenant_id="t1", value={"approved": True}, waitpoint_id=wait.waitpoint_id)
    assert resumed.run.status is Status.PENDING and resumed.waitpoint_id == wait.waitpoint_id
    (after,) = await queue.claim_batch(worker_id="w2", limit=1)
    assert after.resume_state == {"state": {"step": 1}, "waits": {}}
    assert after.lease_id != before.lease_id

    # ... nor after the resume, once another claim holds the run.
    with pytest.raises(LeaseLost):
        await queue.append_events(run_id=run.id, lease_id=before.lease_id, events=[("message.delta", {"text": "x"})])
    with pytest.raises(LeaseLost):
        await queue.finish(run_id=run.id, lease_id=before.lease_id, finish=Finish.done({"zombie": True}))
    recorded = await queue.find_waitpoint(run_id=run.id, name="approval", occurrence=1)
    assert recorded is not None and recorded.value == {"approved": True} and not recorded.timed_out
    done = await queue.finish(run_id=run.id, lease_id=after.lease_id, finish=Finish.done({"ok": True}))
    assert done.status is Status.DONE and done.output == {"ok": True}

    events = await queue.read_events(run.id)
    check_event_log(events)
    assert [e.type for e in events] == [
        "run.queued", "run.started", "tool.call", "run.waiting", "run.resumed", "run.started", "run.completed",
    ]  # fmt: skip
    assert [e.attempt for e in events] == [0, 1, 1, 1, 1, 2, 2]


async def test_a_cancel_requested_before_the_wait_is_written_cancels(queue: Queue) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w1", limit=1)
    await queue.request_cancel(run.id, tenant_id="t1")
    ended = await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.waiting(a_wait()))
    assert ended.status is Status.CANCELLED
    assert (await queue.get_run(run.id, tenant_id=None)).waitpoint is None
    assert await queue.find_waitpoint(run_id=run.id, name="approval", occurrence=1) is None


async def test_resume_errors(queue: Queue) -> None:
    with pytest.raises(RunNotFound):
        await queue.resume(uuid.uuid4(), tenant_id="t1", value=1)
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    with pytest.raises(NotWaiting):
        await queue.resume(run.id, tenant_id="t1", value=1)
    with pytest.raises(RunNotFound):
        await queue.resume(run.id, tenant_id="t2", value=1)


async def test_run_waiting_is_announced_to_a_webhook_subscriber(queue: Queue, engine: AsyncEngine) -> None:
    webhook = {"url": "https://hooks.example.test/runq", "events": ["run.waiting", "run.completed"]}
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}, webhook=webhook))
    silent, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    for claim in await queue.claim_batch(worker_id="w1", limit=2):
        await queue.finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=Finish.waiting(a_wait()))
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT run_id, event_type, event_seq FROM webhook_deliveries"))).all()
    waiting = await queue.get_run(run.id, tenant_id=None)
    assert [(r.run_id, r.event_type, r.event_seq) for r in rows] == [(run.id, "run.waiting", waiting.last_event_seq)]
    assert silent.id not in {r.run_id for r in rows}


async def test_neither_the_claim_nor_the_reaper_reads_waiting_runs(engine: AsyncEngine) -> None:
    """Waiting runs are in no index the claim or the lease reaper walks; the time-outs read
    only open waitpoints past their expiry."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, waitpoint)"
                " SELECT 'acme', 'demo', 3, 'waiting', '{}'::jsonb FROM generate_series(1, 5000)"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO waitpoints (waitpoint_id, run_id, name, occurrence, expires_at, attempt)"
                " SELECT gen_random_uuid(), id, 'w', 1, now() + interval '1 hour', 1 FROM agent_runs"
            )
        )
        await conn.execute(text("ANALYZE agent_runs"))
        await conn.execute(text("ANALYZE waitpoints"))
        plans = {}
        for name, params in [
            ("claim_batch", {"worker_id": "w1", "limit": 32, "lease_s": 30.0}),
            ("pick_expired", {"batch": 500}),
            ("due_waitpoints", {"batch": 500}),
        ]:
            rows = await conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + statement(name).text), params)
            plans[name] = "\n".join(r[0] for r in rows)
        await conn.rollback()  # EXPLAIN ANALYZE ran the statements: nothing of them stays
    assert "Index Scan using ix_agent_runs_claim" in plans["claim_batch"], plans["claim_batch"]
    assert "ix_agent_runs_leased" in plans["pick_expired"], plans["pick_expired"]
    assert "ix_waitpoints_expires_at" in plans["due_waitpoints"], plans["due_waitpoints"]
    for name, plan in plans.items():
        assert "Seq Scan on agent_runs" not in plan and "Seq Scan on waitpoints" not in plan, (name, plan)
        assert "rows=5000" not in plan, (name, plan)


# -- threads (docs/threads.md) and waits ---------------------------------------------------


async def _waiting_thread_run(queue: Queue, *, message: str) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A thread whose run waits, after a checkpoint that added ``message``; and a run queued behind it."""
    thread, _ = await queue.create_thread(tenant_id="t1", metadata={})
    first, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id="t1", agent="demo", input={}))
    behind, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id="t1", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w1", limit=5)  # the run behind waits for its turn
    assert claim.run.id == first.id
    written = await queue.append_events_many(
        [Appended.encoded(first.id, claim.lease_id, (), {"s": 1}, ({"role": "user", "content": message},))]
    )
    assert first.id in written
    await queue.finish(run_id=first.id, lease_id=claim.lease_id, finish=Finish.waiting(a_wait()))
    return thread.id, first.id, behind.id


async def test_a_waiting_run_keeps_its_thread_busy_and_its_turn(queue: Queue) -> None:
    thread_id, first, behind = await _waiting_thread_run(queue, message="hello")
    assert (await queue.get_thread(thread_id, tenant_id="t1")).busy
    assert await queue.claim_batch(worker_id="w2", limit=5) == []  # the next turn waits for the wait
    with pytest.raises(ThreadBusy):
        await queue.enqueue_in_thread(thread_id, NewRun(tenant_id="t1", agent="demo", input={}), strategy=Strategy.REJECT)
    await queue.resume(first, tenant_id="t1", value=1)
    (again,) = await queue.claim_batch(worker_id="w2", limit=5)  # the resumed run, not the one behind
    assert again.run.id == first
    await queue.finish(run_id=first, lease_id=again.lease_id, finish=Finish.done({}))
    assert (await queue.claim_batch(worker_id="w2", limit=5))[0].run.id == behind


@pytest.mark.parametrize(("strategy", "reason", "kept"), [(Strategy.INTERRUPT, "interrupted", 1), (Strategy.ROLLBACK, "rolled_back", 0)])
async def test_interrupt_and_rollback_cancel_a_waiting_run_at_once(
    queue: Queue, strategy: Strategy, reason: str, kept: int
) -> None:
    thread_id, first, behind = await _waiting_thread_run(queue, message="before the wait")
    new, created, cancelled_now = await queue.enqueue_in_thread(
        thread_id, NewRun(tenant_id="t1", agent="demo", input={}), strategy=strategy
    )
    assert created and {r.id for r in cancelled_now} == {first, behind}
    for run_id in (first, behind):
        run = await queue.get_run(run_id, tenant_id="t1")
        assert (run.status, run.cancel_reason, run.waitpoint) == (Status.CANCELLED, reason, None)
    assert [e.type for e in await queue.read_events(first)][-3:] == ["run.waiting", "run.cancel_requested", "run.cancelled"]
    with pytest.raises(NotWaiting):
        await queue.resume(first, tenant_id="t1", value=1)
    assert (await queue.get_thread(thread_id, tenant_id="t1")).message_count == kept
    (nxt,) = await queue.claim_batch(worker_id="w2", limit=5)  # the thread is free at once
    assert nxt.run.id == new.id
