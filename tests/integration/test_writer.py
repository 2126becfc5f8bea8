"""Endings and event appends written in batches keep the semantics of one statement per run."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Finish, Status
from app.errors import LeaseLost
from app.queue import Appended, Ended, NewRun, Queue
from app.worker.writer import Writer


async def test_concurrent_completions_share_a_statement_and_stay_fenced(
    queue: Queue, engine: AsyncEngine
) -> None:
    for _ in range(20):
        await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    claims = await queue.claim_batch(worker_id="w", limit=20)
    stolen = claims[0]
    async with engine.begin() as conn:  # another claim took this run meanwhile
        await conn.execute(text("UPDATE agent_runs SET lease_id = gen_random_uuid() WHERE id = :id"), {"id": stolen.run.id})
    calls = 0
    finish_many = queue.finish_many

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await finish_many(*args, **kwargs)

    queue.finish_many = counting  # type: ignore[method-assign]
    writer = Writer(queue)
    results = await asyncio.gather(
        *(
            writer.finish(
                lambda c=c, i=i: Ended.encoded(
                    c.run.id, c.lease_id, Finish.done({"i": i}), [("message.completed", {"text": str(i)})] * (i % 3)
                )
            )
            for i, c in enumerate(claims)
        ),
        return_exceptions=True,
    )
    assert calls == 1
    assert isinstance(results[0], LeaseLost)
    for i, (claim, completed) in enumerate(zip(claims[1:], results[1:], strict=True), start=1):
        run = await queue.get_run(claim.run.id, tenant_id=None)
        assert run.status is Status.DONE and run.output == {"i": i}
        assert (completed.id, completed.last_event_seq) == (run.id, run.last_event_seq)
        events = await queue.read_events(claim.run.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.type for e in events] == ["run.queued", "run.started"] + ["message.completed"] * (i % 3) + ["run.completed"]
    assert (await queue.get_run(stolen.run.id, tenant_id=None)).status is Status.LEASED


async def test_a_lone_completion_goes_out_at_once(queue: Queue) -> None:
    await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    [claim] = await queue.claim_batch(worker_id="w", limit=1)
    ending = lambda: Ended.encoded(claim.run.id, claim.lease_id, Finish.done(None))  # noqa: E731
    run = await asyncio.wait_for(Writer(queue).finish(ending), timeout=10)
    assert run.status is Status.DONE
    with pytest.raises(LeaseLost):
        await Writer(queue).finish(ending)


async def test_every_ending_goes_out_in_one_statement(queue: Queue, engine: AsyncEngine) -> None:
    for max_attempts in (3, 3, 3, 3, 3, 1):
        await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, max_attempts=max_attempts))
    claims = sorted(await queue.claim_batch(worker_id="w", limit=6), key=lambda c: c.run.max_attempts, reverse=True)
    done, retry, dead, cancelled, released, last_try = claims
    await queue.request_cancel(cancelled.run.id, tenant_id="acme")
    endings = [
        (done, Finish.done({"ok": 1}), Status.DONE, "run.completed"),
        (retry, Finish.retry("flaky", "again"), Status.PENDING, "run.retrying"),
        (dead, Finish.dead("bad", "no"), Status.DEAD, "run.failed"),
        (cancelled, Finish.cancelled(), Status.CANCELLED, "run.cancelled"),
        (released, Finish.released(), Status.PENDING, "run.retrying"),
        (last_try, Finish.retry("flaky", "again"), Status.DEAD, "run.failed"),
    ]
    finished = await queue.finish_many(
        [Ended.encoded(c.run.id, c.lease_id, finish, [("message.delta", {"text": "x"})]) for c, finish, _, _ in endings]
    )
    for claim, _, status, event in endings:
        assert finished[claim.run.id].status is status
        assert [e.type for e in await queue.read_events(claim.run.id)][-2:] == ["message.delta", event]
    assert (await queue.get_run(released.run.id, tenant_id=None)).error_code == "worker_shutdown"
    assert (await queue.get_run(done.run.id, tenant_id=None)).output == {"ok": 1}


async def test_appends_of_many_runs_share_a_statement_and_a_lost_lease_drops_only_its_run(
    queue: Queue, engine: AsyncEngine
) -> None:
    for _ in range(10):
        await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    claims = await queue.claim_batch(worker_id="w", limit=10)
    stolen = claims[3]
    async with engine.begin() as conn:  # another claim took this run meanwhile
        await conn.execute(text("UPDATE agent_runs SET lease_id = gen_random_uuid() WHERE id = :id"), {"id": stolen.run.id})
    statements: list[int] = []
    append_many = queue.append_events_many

    async def counting(appended):  # type: ignore[no-untyped-def]
        statements.append(len(appended))
        return await append_many(appended)

    queue.append_events_many = counting  # type: ignore[method-assign]
    writer = Writer(queue)
    results = await asyncio.gather(
        *(
            writer.append(
                lambda c=c, i=i: Appended.encoded(
                    c.run.id,
                    c.lease_id,
                    [("message.delta", {"text": f"{i}a"}), ("message.delta", {"text": f"{i}b"})],
                    {"i": i} if i % 2 else None,
                )
            )
            for i, c in enumerate(claims)
        ),
        return_exceptions=True,
    )
    assert statements == [10]
    assert isinstance(results[3], LeaseLost)
    assert [e.type for e in await queue.read_events(stolen.run.id)] == ["run.queued", "run.started"]
    for i, (claim, stored) in enumerate(zip(claims, results, strict=True)):
        if i == 3:
            continue
        last_seq = stored.last_event_seq
        events = await queue.read_events(claim.run.id)
        assert [e.seq for e in events] == [1, 2, 3, 4] == list(range(1, last_seq + 1))
        assert [e.data for e in events[2:]] == [{"text": f"{i}a"}, {"text": f"{i}b"}]
        async with engine.connect() as conn:
            saved = (
                await conn.execute(text("SELECT state, event_seq FROM run_checkpoints WHERE run_id = :id"), {"id": claim.run.id})
            ).first()
        assert (saved is None) if i % 2 == 0 else (tuple(saved) == ({"i": i}, 4))  # type: ignore[arg-type]


async def test_a_lost_attempts_flush_beside_the_next_attempts_writes_only_the_current_lease(
    queue: Queue, engine: AsyncEngine
) -> None:
    """One batch holding a run twice: the flush of an attempt whose lease was lost and the
    writes of the attempt that re-claimed it. Only the current lease's events are stored, from
    the run's own last seq: none past it, so the run's next writer finds its seq free."""
    await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    lost = (await queue.claim_batch(worker_id="w", limit=1))[0]
    async with engine.begin() as conn:  # its lease expired and the reaper requeued it
        await conn.execute(text("UPDATE agent_runs SET locked_until = now() - interval '1 second' WHERE id = :id"), {"id": lost.run.id})
    await queue.reap_expired()
    current = (await queue.claim_batch(worker_id="w", limit=1))[0]
    run_id = current.run.id
    assert (run_id, current.lease_id != lost.lease_id) == (lost.run.id, True)

    written = await queue.append_events_many([
        Appended.encoded(run_id, lost.lease_id, events=[("message.delta", {"text": "lost 1"}), ("message.delta", {"text": "lost 2"})]),
        Appended.encoded(run_id, current.lease_id, events=[("message.delta", {"text": "current"})]),
    ])  # fmt: skip
    finished = await queue.finish_many([
        Ended.encoded(run_id, lost.lease_id, Finish.done({"from": "lost"}), events=(("message.completed", {"text": "lost"}),)),
        Ended.encoded(run_id, current.lease_id, Finish.done({"from": "current"}), events=(("message.completed", {"text": "current"}),)),
    ])  # fmt: skip

    events = await queue.read_events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert not [e for e in events if "lost" in str(e.data.get("text", ""))]
    assert [e.type for e in events][-3:] == ["message.delta", "message.completed", "run.completed"]
    run = await queue.get_run(run_id, tenant_id=None)
    assert (run.status, run.output, run.last_event_seq) == (Status.DONE, {"from": "current"}, events[-1].seq)
    assert written[run_id].last_event_seq == events[-3].seq and finished[run_id].last_event_seq == events[-1].seq
