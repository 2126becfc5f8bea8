"""Threads in the queue (docs/threads.md): one run of a thread at a time in creation order, the
multitask strategies, messages written fenced with checkpoints and endings, deletion, retention."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import defaultdict
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Claim, Finish, Status, Strategy
from app.errors import ThreadBusy, ThreadNotFound
from app.queue import CLAIM_BATCH, CLAIM_BATCH_CAPPED, Appended, Ended, NewRun, Queue

TENANT = "acme"


async def new_thread(queue: Queue, tenant_id: str = TENANT) -> uuid.UUID:
    thread, _ = await queue.create_thread(tenant_id=tenant_id, metadata={})
    return thread.id


async def thread_run(
    queue: Queue, thread_id: uuid.UUID, strategy: Strategy = Strategy.ENQUEUE, **input: object
) -> uuid.UUID:
    run, created, _ = await queue.enqueue_in_thread(
        thread_id, NewRun(tenant_id=TENANT, agent="demo", input=input), strategy=strategy
    )
    assert created
    return run.id


async def claim_one(queue: Queue, worker_id: str = "w1") -> Claim:
    claims = await queue.claim_batch(worker_id=worker_id, limit=1)
    assert len(claims) == 1, claims
    return claims[0]


async def history(queue: Queue, thread_id: uuid.UUID) -> list[dict[str, object]]:
    return [m.message for m in await queue.thread_messages(thread_id, tenant_id=TENANT, limit=1000)]


async def checkpoint_with(queue: Queue, claim: Claim, *messages: dict[str, object]) -> None:
    written = await queue.append_events_many(
        [Appended.encoded(claim.run.id, claim.lease_id, (("message.completed", {"text": "x"}),), {"s": 1}, messages)]
    )
    assert claim.run.id in written


def user(text_: str) -> dict[str, object]:
    return {"role": "user", "content": text_}


async def test_eight_claimers_over_fifty_threads_keep_each_thread_in_order(engine: AsyncEngine) -> None:
    queue = Queue(engine, lease_s=30)
    threads = [await new_thread(queue) for _ in range(50)]
    order: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for _ in range(5):  # interleaved: each thread's runs are spread over the whole queue
        for thread_id in threads:
            order[thread_id].append(await thread_run(queue, thread_id))
    held: dict[uuid.UUID, uuid.UUID] = {}  # thread -> the run leased now
    started: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    overlaps: list[str] = []
    rng = random.Random(16)

    async def claimer(n: int) -> None:
        idle = 0
        while sum(len(s) for s in started.values()) < 250 and idle < 200:
            claims = await queue.claim_batch(worker_id=f"w{n}", limit=rng.randint(1, 4))
            idle = 0 if claims else idle + 1
            for claim in claims:
                thread_id = claim.run.thread_id
                assert thread_id is not None
                if thread_id in held:
                    overlaps.append(f"{claim.run.id} leased while {held[thread_id]} is")
                held[thread_id] = claim.run.id
                started[thread_id].append(claim.run.id)
            await asyncio.sleep(0)
            for claim in claims:
                del held[claim.run.thread_id]  # type: ignore[arg-type]  # before the ending commits
                await queue.finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=Finish.done({}))

    await asyncio.gather(*(claimer(n) for n in range(8)))
    assert not overlaps, overlaps[:5]
    assert dict(started) == dict(order)


async def test_a_run_waits_for_every_earlier_run_of_its_thread_and_other_threads_do_not(queue: Queue) -> None:
    busy, other = await new_thread(queue), await new_thread(queue)
    first = await thread_run(queue, busy)
    second = await thread_run(queue, busy)
    elsewhere = await thread_run(queue, other)
    claims = await queue.claim_batch(worker_id="w1", limit=10)
    assert {c.run.id for c in claims} == {first, elsewhere}
    assert (await queue.queue_depth()).waiting_for_turn == 1
    retried = next(c for c in claims if c.run.id == first)
    await queue.finish(run_id=first, lease_id=retried.lease_id, finish=Finish.retry("flaky", "again"))
    assert await queue.claim_batch(worker_id="w1", limit=10) == []  # pending again, still first in line
    async with queue.engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET available_at = now() WHERE id = :id"), {"id": first})
    again = await claim_one(queue)
    assert again.run.id == first
    await queue.finish(run_id=first, lease_id=again.lease_id, finish=Finish.done({}))
    assert (await claim_one(queue)).run.id == second
    assert (await queue.queue_depth()).waiting_for_turn == 0


async def test_the_claim_checks_turns_through_the_partial_index_not_the_history(
    queue: Queue, engine: AsyncEngine
) -> None:
    thread_id = await new_thread(queue)
    async with engine.begin() as conn:  # a long finished history in one thread, many lone runs
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, thread_id, thread_turn, finished_at)"
                " SELECT 'acme', 'demo', 3, 'done', :t, g, now() FROM generate_series(1, 3000) g"
            ),
            {"t": thread_id},
        )
        await conn.execute(text("UPDATE threads SET run_count = 3000 WHERE id = :t"), {"t": thread_id})
    await thread_run(queue, thread_id)
    await queue.enqueue_many(tenant_id="acme", agent="demo", inputs=[{}] * 2000)
    params = {"worker_id": "w1", "limit": 32, "lease_s": 30.0}
    capped = params | {"default_cap": 0, "scan": 256}
    async with engine.connect() as conn:
        await conn.execute(text("ANALYZE agent_runs"))
        for statement, values in ((CLAIM_BATCH, params), (CLAIM_BATCH_CAPPED, capped)):
            plan = "\n".join(r[0] for r in await conn.execute(text("EXPLAIN " + str(statement)), values))
            assert "ix_agent_runs_thread_inflight" in plan, plan
            assert "Seq Scan on agent_runs" not in plan, plan


@pytest.mark.parametrize("strategy", [Strategy.REJECT, Strategy.ENQUEUE, Strategy.INTERRUPT, Strategy.ROLLBACK])
async def test_an_idle_thread_takes_a_run_with_any_strategy(queue: Queue, strategy: Strategy) -> None:
    thread_id = await new_thread(queue)
    run_id = await thread_run(queue, thread_id, strategy)
    assert (await claim_one(queue)).run.id == run_id


async def test_reject_on_a_busy_thread_creates_nothing(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    first = await thread_run(queue, thread_id)
    with pytest.raises(ThreadBusy):
        await thread_run(queue, thread_id, Strategy.REJECT)
    runs = await queue.list_thread_runs(thread_id, tenant_id=TENANT)
    assert [r.id for _, r in runs] == [first]
    assert (await queue.get_thread(thread_id, tenant_id=TENANT)).busy


async def test_concurrent_reject_creates_on_an_idle_thread_make_exactly_one_run(engine: AsyncEngine) -> None:
    queue = Queue(engine)
    thread_id = await new_thread(queue)
    results = await asyncio.gather(
        *(thread_run(queue, thread_id, Strategy.REJECT, n=n) for n in range(12)), return_exceptions=True
    )
    made = [r for r in results if isinstance(r, uuid.UUID)]
    assert len(made) == 1, results
    assert all(isinstance(r, ThreadBusy) for r in results if r not in made), results
    assert [r.id for _, r in await queue.list_thread_runs(thread_id, tenant_id=TENANT)] == made


async def test_concurrent_enqueue_creates_take_distinct_turns_in_commit_order(engine: AsyncEngine) -> None:
    queue = Queue(engine)
    thread_id = await new_thread(queue)
    await asyncio.gather(*(thread_run(queue, thread_id, n=n) for n in range(12)))
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT thread_turn FROM agent_runs WHERE thread_id = :t ORDER BY thread_turn"),
                {"t": thread_id},
            )
        ).all()
    assert [r.thread_turn for r in rows] == list(range(1, 13))
    listed = await queue.list_thread_runs(thread_id, tenant_id=TENANT)
    assert [turn for turn, _ in listed] == list(range(12, 0, -1))
    assert (await queue.get_thread(thread_id, tenant_id=TENANT)).last_run_id == listed[0][1].id


async def test_interrupt_cancels_the_runs_in_flight_and_keeps_their_messages(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    leased_id = await thread_run(queue, thread_id)
    waiting_id = await thread_run(queue, thread_id)
    leased = await claim_one(queue)
    await checkpoint_with(queue, leased, user("first"))
    new_id = await thread_run(queue, thread_id, Strategy.INTERRUPT)

    waiting = await queue.get_run(waiting_id, tenant_id=TENANT)
    assert (waiting.status, waiting.cancel_reason) == (Status.CANCELLED, "interrupted")
    still = await queue.get_run(leased_id, tenant_id=TENANT)
    assert (still.status, still.cancel_reason) == (Status.LEASED, "interrupted") and still.cancel_requested_at
    assert await queue.claim_batch(worker_id="w2", limit=5) == []  # the new run waits for the leased one
    # The worker notices and ends it cancelled, with the message it added since its checkpoint.
    await queue.finish_many([Ended.encoded(leased_id, leased.lease_id, Finish.cancelled(), (), (user("second"),))])
    assert await history(queue, thread_id) == [user("first"), user("second")]
    assert (await claim_one(queue)).run.id == new_id
    events = [e.type for e in await queue.read_events(waiting_id)]
    assert events[-2:] == ["run.cancel_requested", "run.cancelled"]


async def test_rollback_leaves_the_history_byte_identical(queue: Queue, engine: AsyncEngine) -> None:
    thread_id = await new_thread(queue)
    done_id = await thread_run(queue, thread_id)
    done = await claim_one(queue)
    await checkpoint_with(queue, done, user("kept"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\": \"ls\"}"}}]})  # fmt: skip
    await queue.finish_many([Ended.encoded(done_id, done.lease_id, Finish.done({}), (), ({"role": "tool", "tool_call_id": "c1", "content": "ünï"},))])  # fmt: skip

    async def raw() -> str:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT idx, message::text, run_id, created_at FROM thread_messages WHERE thread_id = :t ORDER BY idx"),
                {"t": thread_id},
            )
            return json.dumps([list(map(str, r)) for r in rows])

    before, count = await raw(), (await queue.get_thread(thread_id, tenant_id=TENANT)).message_count
    rolled = await thread_run(queue, thread_id)
    queued = await thread_run(queue, thread_id)
    leased = await claim_one(queue)
    assert leased.run.id == rolled
    await checkpoint_with(queue, leased, user("to be rolled back"))
    interrupted_again = await thread_run(queue, thread_id, Strategy.ROLLBACK)
    assert await raw() == before
    assert (await queue.get_thread(thread_id, tenant_id=TENANT)).message_count == count == 3
    # A run being rolled back stores nothing more, whether from a checkpoint or its ending.
    await checkpoint_with(queue, leased, user("late checkpoint"))
    await queue.finish_many([Ended.encoded(rolled, leased.lease_id, Finish.cancelled(), (), (user("late ending"),))])
    assert await raw() == before
    for run_id in (rolled, queued):
        run = await queue.get_run(run_id, tenant_id=TENANT)
        assert (run.status, run.cancel_reason) == (Status.CANCELLED, "rolled_back")
    nxt = await claim_one(queue)
    assert nxt.run.id == interrupted_again
    await checkpoint_with(queue, nxt, user("after"))
    assert [m.index for m in await queue.thread_messages(thread_id, tenant_id=TENANT)] == [0, 1, 2, 3]


async def test_rollback_after_an_interrupt_removes_the_interrupted_runs_messages_too(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    first = await thread_run(queue, thread_id)
    leased = await claim_one(queue)
    await checkpoint_with(queue, leased, user("one"))
    await thread_run(queue, thread_id, Strategy.INTERRUPT)
    await thread_run(queue, thread_id, Strategy.ROLLBACK)
    assert await history(queue, thread_id) == []
    await queue.finish_many([Ended.encoded(first, leased.lease_id, Finish.cancelled(), (), (user("two"),))])
    assert await history(queue, thread_id) == []
    assert (await queue.get_run(first, tenant_id=TENANT)).cancel_reason == "rolled_back"


@pytest.mark.parametrize("finish", [Finish.retry("flaky", "boom"), Finish.dead("fatal", "boom"), Finish.released()])
async def test_an_attempt_that_fails_before_its_checkpoint_adds_no_message(queue: Queue, finish: Finish) -> None:
    thread_id = await new_thread(queue)
    run_id = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await queue.finish_many([Ended.encoded(run_id, claim.lease_id, finish, (), (user("lost"),))])
    assert await history(queue, thread_id) == []


async def test_a_failed_attempt_of_a_run_asked_to_stop_adds_no_message(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    run_id = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await queue.request_cancel(run_id, tenant_id=TENANT)
    await queue.finish_many([Ended.encoded(run_id, claim.lease_id, Finish.retry("flaky", "boom"), (), (user("lost"),))])
    assert (await queue.get_run(run_id, tenant_id=TENANT)).status is Status.CANCELLED
    assert await history(queue, thread_id) == []


async def test_a_lost_lease_writes_no_message(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    stale = Appended.encoded(claim.run.id, uuid.uuid4(), (), {"s": 1}, (user("stale"),))
    assert await queue.append_events_many([stale]) == {}
    assert await history(queue, thread_id) == []


async def test_history_for_an_attempt_leaves_out_its_own_run(queue: Queue) -> None:
    thread_id = await new_thread(queue)
    first = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await queue.finish_many([Ended.encoded(first, claim.lease_id, Finish.done({}), (), (user("a"), user("b")))])
    second = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await checkpoint_with(queue, claim, user("c"))
    assert await queue.thread_history(thread_id, run_id=second) == [user("a"), user("b")]


async def test_delete_thread_refuses_while_busy_then_takes_messages_and_runs(queue: Queue, engine: AsyncEngine) -> None:
    thread_id = await new_thread(queue)
    run_id = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await checkpoint_with(queue, claim, user("hi"))
    with pytest.raises(ThreadBusy):
        await queue.delete_thread(thread_id, tenant_id=TENANT)
    await queue.finish(run_id=run_id, lease_id=claim.lease_id, finish=Finish.done({}))
    with pytest.raises(ThreadNotFound):
        await queue.delete_thread(thread_id, tenant_id="globex")
    await queue.delete_thread(thread_id, tenant_id=TENANT)
    async with engine.connect() as conn:
        left = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM agent_runs WHERE id = :r) + (SELECT count(*) FROM run_events"
                    " WHERE run_id = :r) + (SELECT count(*) FROM thread_messages WHERE thread_id = :t)"
                ),
                {"r": run_id, "t": thread_id},
            )
        ).scalar()
    assert left == 0
    with pytest.raises(ThreadNotFound):
        await queue.get_thread(thread_id, tenant_id=TENANT)


async def test_retention_purges_a_threads_old_runs_and_keeps_its_conversation(queue: Queue, engine: AsyncEngine) -> None:
    thread_id = await new_thread(queue)
    run_id = await thread_run(queue, thread_id)
    claim = await claim_one(queue)
    await queue.finish_many([Ended.encoded(run_id, claim.lease_id, Finish.done({}), (), (user("remember me"),))])
    async with engine.begin() as conn:
        await conn.execute(
            # created and finished 40 days ago (its events follow into the default partition,
            # which retention purges row by row: app/queue/partitions.py)
            text(
                "UPDATE agent_runs SET finished_at = now() - CAST(:age AS interval),"
                " created_at = now() - CAST(:age AS interval), history_at = now() - CAST(:age AS interval)"
                " WHERE id = :id"
            ),
            {"age": timedelta(days=40), "id": run_id},
        )
    assert await queue.purge_finished(older_than_s=30 * 86400) == 1
    assert await queue.list_thread_runs(thread_id, tenant_id=TENANT) == []
    messages = await queue.thread_messages(thread_id, tenant_id=TENANT)
    assert [(m.message, m.run_id) for m in messages] == [(user("remember me"), run_id)]
    thread = await queue.get_thread(thread_id, tenant_id=TENANT)
    assert (thread.busy, thread.last_run_id, thread.message_count) == (False, None, 1)


async def test_another_tenants_thread_is_not_found(queue: Queue) -> None:
    thread_id = await new_thread(queue, tenant_id="globex")
    for call in (
        queue.get_thread(thread_id, tenant_id=TENANT),
        queue.thread_messages(thread_id, tenant_id=TENANT),
        queue.list_thread_runs(thread_id, tenant_id=TENANT),
        queue.enqueue_in_thread(thread_id, NewRun(tenant_id=TENANT, agent="demo", input={})),
        queue.delete_thread(thread_id, tenant_id=TENANT),
    ):
        with pytest.raises(ThreadNotFound):
            await call
    assert await queue.list_threads(tenant_id=TENANT) == []


async def test_capped_claims_keep_each_thread_in_order_too(engine: AsyncEngine) -> None:
    queue = Queue(engine, tenant_max_inflight=10)
    thread_id = await new_thread(queue)
    first = await thread_run(queue, thread_id)
    await thread_run(queue, thread_id)
    claims = await queue.claim_batch(worker_id="w1", limit=5)
    assert [c.run.id for c in claims] == [first]
