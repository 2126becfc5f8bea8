"""Completions written in batches keep the semantics of one ``complete`` per run."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Completed, LeaseLost, Status
from app.queue import Queue
from app.worker.completions import CompletionBatcher


async def test_concurrent_completions_share_a_statement_and_stay_fenced(
    queue: Queue, engine: AsyncEngine
) -> None:
    for _ in range(20):
        await queue.enqueue(tenant_id="acme", agent="demo", input={})
    claims = await queue.claim_batch(worker_id="w", limit=20)
    stolen = claims[0]
    async with engine.begin() as conn:  # another claim took this run meanwhile
        await conn.execute(text("UPDATE agent_runs SET lease_id = gen_random_uuid() WHERE id = :id"), {"id": stolen.run.id})
    batcher = CompletionBatcher(queue)
    calls = 0
    complete_many = queue.complete_many

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await complete_many(*args, **kwargs)

    queue.complete_many = counting  # type: ignore[method-assign]
    results = await asyncio.gather(
        *(
            batcher.complete(
                run_id=c.run.id, lease_id=c.lease_id, output={"i": i},
                events=[("message.completed", {"text": str(i)})] * (i % 3),
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
        assert completed == Completed(id=run.id, last_event_seq=run.last_event_seq)
        events = await queue.read_events(claim.run.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.type for e in events] == ["run.queued", "run.started"] + ["message.completed"] * (i % 3) + ["run.completed"]
    assert (await queue.get_run(stolen.run.id, tenant_id=None)).status is Status.LEASED


async def test_a_lone_completion_goes_out_at_once(queue: Queue) -> None:
    await queue.enqueue(tenant_id="acme", agent="demo", input={})
    [claim] = await queue.claim_batch(worker_id="w", limit=1)
    run = await asyncio.wait_for(
        CompletionBatcher(queue).complete(run_id=claim.run.id, lease_id=claim.lease_id, output=None, events=()),
        timeout=10,
    )
    assert run.status is Status.DONE
    with pytest.raises(LeaseLost):
        await CompletionBatcher(queue).complete(run_id=claim.run.id, lease_id=claim.lease_id, output=None, events=())
