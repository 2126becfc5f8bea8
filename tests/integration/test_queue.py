"""The repository layer against real PostgreSQL: claims, fencing, retries, cancel, events, reaper.

Time is moved in SQL (``locked_until`` set in the past), never slept away.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.backoff import RetryBackoff
from app.db.url import asyncpg_dsn
from app.domain import Claim, Finish, Status, WorkerInfo
from app.errors import IdempotencyConflict, LeaseLost, NotRequeueable, RunFinished, RunNotFound
from app.queue import CLAIM_BATCH, EVENTS_CHANNEL, Ended, NewRun, Queue

CLAIM_PARAMS = {"worker_id": "w1", "limit": 32, "lease_s": 30.0}
WORKER = WorkerInfo.start(slots=4)


async def enqueue(queue: Queue, **overrides: object) -> uuid.UUID:
    fields: dict[str, Any] = {"tenant_id": "acme", "agent": "demo", "input": {}} | overrides
    run, _ = await queue.enqueue(NewRun(**fields))
    return run.id


async def claim_one(queue: Queue, worker_id: str = "w1") -> Claim:
    claims = await queue.claim_batch(worker_id=worker_id, limit=1)
    assert len(claims) == 1
    return claims[0]


async def expire_lease(engine: AsyncEngine, run_id: uuid.UUID) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_runs SET locked_until = now() - interval '1 second' WHERE id = :id"),
            {"id": run_id},
        )


async def events_of(queue: Queue, run_id: uuid.UUID) -> list[tuple[int, str, int]]:
    return [(e.seq, e.type, e.attempt) for e in await queue.read_events(run_id)]


async def test_enqueue_stores_pending_run_with_queued_event(queue: Queue) -> None:
    run, created = await queue.enqueue(NewRun(
        tenant_id="acme", agent="demo", input={"prompt": "hi"}, budget={"max_turns": 2}, priority=3)
    )
    assert created
    assert (run.status, run.attempts, run.last_event_seq, run.input, run.budget) == (
        Status.PENDING, 0, 1, {"prompt": "hi"}, {"max_turns": 2},
    )
    assert await events_of(queue, run.id) == [(1, "run.queued", 0)]


async def test_idempotency_key_returns_same_run_and_refuses_other_body(queue: Queue) -> None:
    first, created = await queue.enqueue(NewRun(
        tenant_id="acme", agent="demo", input={}, idempotency_key="k", request_digest="a")
    )
    again, created_again = await queue.enqueue(NewRun(
        tenant_id="acme", agent="demo", input={}, idempotency_key="k", request_digest="a")
    )
    assert created and not created_again and again.id == first.id
    with pytest.raises(IdempotencyConflict):
        await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, idempotency_key="k", request_digest="b"))
    other, created_other = await queue.enqueue(NewRun(
        tenant_id="globex", agent="demo", input={}, idempotency_key="k", request_digest="a")
    )
    assert created_other and other.id != first.id


async def test_concurrent_identical_enqueues_create_one_run(queue: Queue) -> None:
    results = await asyncio.gather(
        *(
            queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}, idempotency_key="same", request_digest="d"))
            for _ in range(10)
        )
    )
    assert len({run.id for run, _ in results}) == 1
    assert sum(created for _, created in results) == 1


async def test_eight_concurrent_claimers_never_double_claim(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:  # 2,000 runs in one statement; enqueue() is tested above
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, input_json)"
                " SELECT 'acme', 'demo', 3, '{}' FROM generate_series(1, 2000)"
            )
        )
    claimed: list[uuid.UUID] = []

    async def claimer(n: int) -> None:
        while batch := await queue.claim_batch(worker_id=f"w{n}", limit=random.randint(1, 16)):
            claimed.extend(c.run.id for c in batch)

    await asyncio.gather(*(claimer(n) for n in range(8)))
    assert len(claimed) == 2000
    assert len(set(claimed)) == 2000
    async with engine.begin() as conn:
        counts = dict((await conn.execute(text("SELECT status, count(*) FROM agent_runs GROUP BY 1"))).all())
    assert counts == {"leased": 2000}


async def test_claim_order_is_priority_first_then_fifo(queue: Queue) -> None:
    priorities = [random.choice([0, 1, 5]) for _ in range(60)]
    ids = [await enqueue(queue, priority=p) for p in priorities]
    expected = [run_id for _, _, run_id in sorted(zip([-p for p in priorities], range(60), ids, strict=True))]
    order: list[uuid.UUID] = []
    while batch := await queue.claim_batch(worker_id="w", limit=7):
        order.extend(c.run.id for c in batch)
    assert order == expected


async def test_claim_skips_delayed_and_cancel_requested_runs(queue: Queue, engine: AsyncEngine) -> None:
    delayed = await enqueue(queue, delay_s=3600)
    flagged = await enqueue(queue)
    ready = await enqueue(queue)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET cancel_requested_at = now() WHERE id = :id"), {"id": flagged})
    claims = await queue.claim_batch(worker_id="w", limit=10)
    assert [c.run.id for c in claims] == [ready]
    assert delayed != ready


async def test_a_claim_says_whether_runs_were_left_and_whether_more_than_the_free_slots(
    queue: Queue, engine: AsyncEngine
) -> None:
    """``more``: runnable runs left beyond the other workers' free slots (claim again at once);
    ``unclaimed``: some left, which those slots were woken for (app/worker/runner.py)."""
    other = WorkerInfo.start(slots=2)
    await queue.renew_leases({}, worker=other)  # two free slots registered elsewhere
    runs = [await enqueue(queue) for _ in range(5)]
    await enqueue(queue, delay_s=3600)  # not runnable: never counts
    outlooks = []
    for _ in range(5):
        claims = await queue.claim_batch(worker_id="w1", limit=1)
        outlooks.append((claims[0].run.id, claims.more, claims.unclaimed))
    assert outlooks == [
        (runs[0], True, True), (runs[1], True, True), (runs[2], False, True), (runs[3], False, True),
        (runs[4], False, False),
    ]  # fmt: skip
    claims = await queue.claim_batch(worker_id="w1", limit=1)
    assert (len(claims), claims.more, claims.unclaimed) == (0, False, False)


async def test_a_short_claim_says_whether_a_concurrent_claim_held_runs_it_saw(
    queue: Queue, engine: AsyncEngine
) -> None:
    """"The queue is empty" and "a concurrent claim held what I saw" differ: a woken worker that
    lost its run to a concurrent claim looks again at once (app/worker/runner.py)."""
    held = await enqueue(queue)
    await enqueue(queue, delay_s=3600)  # not runnable: never counts as lost
    async with engine.connect() as conn, conn.begin():  # the concurrent claim, mid-statement
        await conn.execute(text("SELECT 1 FROM agent_runs WHERE id = :id FOR UPDATE"), {"id": held})
        claims = await queue.claim_batch(worker_id="w1", limit=2)
        assert (len(claims), claims.lost) == (0, True)
    claims = await queue.claim_batch(worker_id="w1", limit=2)
    assert ([c.run.id for c in claims], claims.lost) == ([held], False)
    claims = await queue.claim_batch(worker_id="w1", limit=2)
    assert (len(claims), claims.lost) == (0, False)


async def test_claim_appends_started_event_and_counts_attempts(queue: Queue) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    assert claim.run.attempts == 1 and claim.run.status is Status.LEASED
    assert claim.run.locked_by == "w1" and claim.resume_state is None
    assert await events_of(queue, run_id) == [(1, "run.queued", 0), (2, "run.started", 1)]


async def test_complete_stores_output_and_terminal_event(queue: Queue) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    done = await queue.finish(
        run_id=run_id, lease_id=claim.lease_id, finish=Finish.done({"text": "ok"}),
        events=[("message.completed", {"text": "ok"})],
    )
    assert done.status is Status.DONE and done.output == {"text": "ok"} and done.finished_at
    assert done.locked_by is None and done.locked_until is None
    events = await queue.read_events(run_id)
    assert [e.type for e in events] == ["run.queued", "run.started", "message.completed", "run.completed"]
    assert events[-1].data == {"output": {"text": "ok"}}


async def test_backoff_schedule_then_dead_letter(queue: Queue, engine: AsyncEngine) -> None:
    queue.retry = RetryBackoff(5.0, 12.0)
    run_id = await enqueue(queue, max_attempts=4)
    delays = []
    for attempt in range(1, 5):
        async with engine.begin() as conn:  # make it runnable now instead of waiting out the backoff
            await conn.execute(text("UPDATE agent_runs SET available_at = now() WHERE id = :id"), {"id": run_id})
        claim = await claim_one(queue)
        assert claim.run.attempts == attempt
        run = await queue.finish(run_id=run_id, lease_id=claim.lease_id, finish=Finish.retry("flaky", "try again"))
        if run.status is Status.PENDING:
            delays.append((run.available_at - run.updated_at).total_seconds())
    assert delays == [5.0, 10.0, 12.0]  # min(retry_max_s, retry_base_s * 2^(attempts-1))
    assert run.status is Status.DEAD and run.error_code == "flaky" and run.finished_at
    events = await queue.read_events(run_id)
    assert [e.type for e in events].count("run.retrying") == 3
    assert events[-1].type == "run.failed"
    assert events[-1].data == {"error_code": "flaky", "error_message": "try again"}


async def test_fatal_error_is_dead_at_once(queue: Queue) -> None:
    run_id = await enqueue(queue, max_attempts=5)
    claim = await claim_one(queue)
    run = await queue.finish(run_id=run_id, lease_id=claim.lease_id, finish=Finish.dead("bad_input", "no"))
    assert (run.status, run.attempts, run.error_code) == (Status.DEAD, 1, "bad_input")


async def test_expired_lease_returns_to_pending_then_dies_when_attempts_are_used(
    queue: Queue, engine: AsyncEngine
) -> None:
    run_id = await enqueue(queue, max_attempts=2)
    for expected in (Status.PENDING, Status.DEAD):
        await claim_one(queue)
        await expire_lease(engine, run_id)
        reaped = await queue.reap_expired()
        assert [(r.id, r.status) for r in reaped] == [(run_id, expected)]
    run = await queue.get_run(run_id, tenant_id=None)
    assert run.error_code == "lease_expired"
    assert [e.type for e in await queue.read_events(run_id)][-1] == "run.failed"


async def test_reaper_ignores_live_leases(queue: Queue) -> None:
    await enqueue(queue)
    await claim_one(queue)
    assert await queue.reap_expired() == []


async def test_two_reapers_at_once_reclaim_each_expired_lease_once(queue: Queue, engine: AsyncEngine) -> None:
    ids = [await enqueue(queue) for _ in range(50)]
    await queue.claim_batch(worker_id="w", limit=50)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET locked_until = now() - interval '1 second'"))
    other = Queue(engine)
    first, second = await asyncio.gather(queue.reap_expired(), other.reap_expired())
    reaped = [r.id for r in first + second]
    assert sorted(reaped) == sorted(ids)
    for run_id in ids:
        assert [e.type for e in await queue.read_events(run_id)].count("run.retrying") == 1


async def test_cancel_requested_run_whose_lease_expires_ends_cancelled(queue: Queue, engine: AsyncEngine) -> None:
    run_id = await enqueue(queue)
    await claim_one(queue)
    await queue.request_cancel(run_id, tenant_id="acme")
    await expire_lease(engine, run_id)
    [reaped] = await queue.reap_expired()
    assert reaped.status is Status.CANCELLED and reaped.cancel_reason == "user"
    assert [e.type for e in await queue.read_events(run_id)][-2:] == ["run.cancel_requested", "run.cancelled"]


async def test_cancel_pending_is_immediate_leased_is_requested_terminal_refused(queue: Queue) -> None:
    pending = await enqueue(queue)
    run = await queue.request_cancel(pending, tenant_id="acme", note="changed my mind")
    assert run.status is Status.CANCELLED and run.cancel_reason == "user"
    events = await queue.read_events(pending)
    assert [(e.type, e.data) for e in events[-2:]] == [
        ("run.cancel_requested", {"reason": "user", "note": "changed my mind"}),
        ("run.cancelled", {"reason": "user"}),
    ]
    with pytest.raises(RunFinished):
        await queue.request_cancel(pending, tenant_id="acme")

    leased = await enqueue(queue)
    claim = await claim_one(queue)
    run = await queue.request_cancel(leased, tenant_id="acme")
    assert run.status is Status.LEASED and run.cancel_requested_at is not None
    again = await queue.request_cancel(leased, tenant_id="acme")  # a repeat while under way
    assert again.cancel_requested_at == run.cancel_requested_at
    check = await queue.renew_leases({leased: claim.lease_id}, worker=WORKER)
    assert check.cancel_requested == {leased} and not check.lost
    final = await queue.finish(
        run_id=leased, lease_id=claim.lease_id, finish=Finish.cancelled(), events=[("message.delta", {"text": "par"})]
    )
    assert final.status is Status.CANCELLED
    assert [e.type for e in await queue.read_events(leased)][-3:] == [
        "run.cancel_requested", "message.delta", "run.cancelled",
    ]
    with pytest.raises(RunNotFound):
        await queue.request_cancel(leased, tenant_id="globex")


async def test_release_makes_run_available_at_once_without_losing_the_attempt(queue: Queue) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    run = await queue.finish(run_id=run_id, lease_id=claim.lease_id, finish=Finish.released())
    assert run.status is Status.PENDING and run.attempts == 1
    assert (await claim_one(queue, "w2")).run.attempts == 2


async def test_renew_reports_lost_leases(queue: Queue, engine: AsyncEngine) -> None:
    kept, lost = await enqueue(queue), await enqueue(queue)
    claims = {c.run.id: c.lease_id for c in await queue.claim_batch(worker_id="w", limit=2)}
    await expire_lease(engine, lost)
    await queue.reap_expired()
    before = await queue.get_run(kept, tenant_id=None)
    check = await queue.renew_leases(claims, worker=WORKER)
    assert check.lost == {lost} and not check.cancel_requested
    after = await queue.get_run(kept, tenant_id=None)
    assert after.locked_until and before.locked_until and after.locked_until >= before.locked_until


async def _assert_stale_claim_changes_nothing(queue: Queue, stale: Claim) -> None:
    run_id = stale.run.id
    before = await queue.get_run(run_id, tenant_id=None)
    before_events = await events_of(queue, run_id)
    check = await queue.renew_leases({run_id: stale.lease_id}, worker=WORKER)
    assert check.lost == {run_id}
    writes = [
        queue.append_events(run_id=run_id, lease_id=stale.lease_id, events=[("message.delta", {"text": "zombie"})]),
        queue.append_events(run_id=run_id, lease_id=stale.lease_id, events=(), state={"zombie": True}),
        *(
            queue.finish(run_id=run_id, lease_id=stale.lease_id, finish=finish)
            for finish in (
                Finish.done("zombie"), Finish.retry("x", "x"), Finish.dead("x", "x"), Finish.cancelled(), Finish.released()
            )
        ),
        queue.record_effect(run_id=run_id, lease_id=stale.lease_id, key="k", result=1),
    ]
    for write in writes:
        with pytest.raises(LeaseLost):
            await write
    after = await queue.get_run(run_id, tenant_id=None)
    assert (after.status, after.locked_until, after.last_event_seq) == (
        before.status, before.locked_until, before.last_event_seq,
    )
    assert await events_of(queue, run_id) == before_events
    assert await queue.effects_of(run_id) == {}


@pytest.mark.parametrize("second_worker", ["w2", "w1"])  # also the same worker id re-claiming
async def test_fencing_after_lease_expiry_and_reclaim(
    queue: Queue, engine: AsyncEngine, second_worker: str
) -> None:
    run_id = await enqueue(queue)
    stale = await claim_one(queue, "w1")
    await queue.request_cancel(run_id, tenant_id="acme")  # so a cancelled ending would otherwise apply
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agent_runs SET cancel_requested_at = NULL WHERE id = :id"), {"id": run_id})
    await expire_lease(engine, run_id)
    await queue.reap_expired()
    fresh = await claim_one(queue, second_worker)
    assert fresh.run.id == run_id and fresh.lease_id != stale.lease_id
    await _assert_stale_claim_changes_nothing(queue, stale)


async def test_fencing_after_admin_requeue_resets_attempts(queue: Queue, engine: AsyncEngine) -> None:
    run_id = await enqueue(queue, max_attempts=1)
    stale = await claim_one(queue, "w1")
    await expire_lease(engine, run_id)
    [dead] = await queue.reap_expired()
    assert dead.status is Status.DEAD
    requeued = await queue.requeue(run_id)
    assert (requeued.status, requeued.attempts) == (Status.PENDING, 0)
    fresh = await claim_one(queue, "w1")
    assert fresh.run.attempts == stale.run.attempts == 1  # same worker, same attempt number
    await _assert_stale_claim_changes_nothing(queue, stale)
    types = [e.type for e in await queue.read_events(run_id)]
    assert types == ["run.queued", "run.started", "run.failed", "run.queued", "run.started"]


async def test_requeue_refuses_live_runs(queue: Queue) -> None:
    run_id = await enqueue(queue)
    with pytest.raises(NotRequeueable):
        await queue.requeue(run_id)
    with pytest.raises(RunNotFound):
        await queue.requeue(uuid.uuid4())


async def test_concurrent_appenders_and_a_tailing_reader_see_a_gapless_log(queue: Queue) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    appenders, per_appender = 6, 40
    done = asyncio.Event()
    seen: list[int] = []

    async def append(n: int) -> None:
        for i in range(per_appender):
            batch = [("message.delta", {"text": f"{n}:{i}:{j}"}) for j in range(random.randint(1, 3))]
            await queue.append_events(run_id=run_id, lease_id=claim.lease_id, events=batch)

    async def tail() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for event in await queue.read_events(run_id, after=last):
                seen.append(event.seq)
                last = event.seq
            if finished:
                return
            await asyncio.sleep(0)

    reader = asyncio.create_task(tail())
    await asyncio.gather(*(append(n) for n in range(appenders)))
    done.set()
    await asyncio.wait_for(reader, timeout=30)
    run = await queue.get_run(run_id, tenant_id=None)
    assert seen == list(range(1, run.last_event_seq + 1))
    texts = Counter(e.data.get("text") for e in await queue.read_events(run_id, limit=10_000))
    assert all(count == 1 for text_, count in texts.items() if text_)


async def test_event_pages_read_many_cursors_with_the_runs_state_in_one_snapshot(queue: Queue) -> None:
    live, finished = await enqueue(queue), await enqueue(queue)
    claims = {c.run.id: c for c in await queue.claim_batch(worker_id="w1", limit=2)}
    await queue.append_events(
        run_id=live, lease_id=claims[live].lease_id, events=[("message.delta", {"text": "é\nx"})] * 3
    )
    await queue.finish(run_id=finished, lease_id=claims[finished].lease_id, finish=Finish.done({"ok": True}))
    gone = uuid.uuid4()

    pages = await queue.read_event_pages([(live, 1), (live, 4), (finished, 0), (gone, 0), (live, 2)], limit=2)

    live_page, caught_up, done_page, missing, second_page = pages
    assert missing is None
    assert live_page is not None and live_page.status is Status.LEASED and live_page.last_event_seq == 5
    assert [(seq, type_) for seq, type_, _ in live_page.events] == [(2, "run.started"), (3, "message.delta")]
    assert caught_up is not None and [seq for seq, *_ in caught_up.events] == [5]
    assert second_page is not None and [seq for seq, *_ in second_page.events] == [3, 4]
    assert json.loads(live_page.events[1][2]) == {"text": "é\nx"}  # JSON text, one line
    assert "\n" not in live_page.events[1][2]
    assert done_page is not None and done_page.status is Status.DONE and done_page.last_event_seq == 3
    assert [type_ for _, type_, _ in done_page.events] == ["run.queued", "run.started"]  # limit 2


async def test_a_claim_and_a_completion_notify_once_for_all_their_runs(queue: Queue, direct_database_url: str) -> None:
    payloads: list[str] = []
    all_heard = asyncio.Event()

    def heard(*args: object) -> None:
        payloads.append(str(args[-1]))
        if sum(p.count(",") + 1 for p in payloads) >= 320:
            all_heard.set()

    listener = await asyncpg.connect(asyncpg_dsn(direct_database_url))
    await listener.add_listener(EVENTS_CHANNEL, heard)
    try:
        await queue.enqueue_many(tenant_id="acme", agent="demo", inputs=[{}] * 160)
        claims = await queue.claim_batch(worker_id="w1", limit=160)
        await queue.finish_many([Ended(c.run.id, c.lease_id, Finish.done(None)) for c in claims])
        async with asyncio.timeout(10):
            await all_heard.wait()
    finally:
        await listener.close()
    # 160 runs: two payloads per statement (150 runs at most in one, to stay under 8,000 bytes).
    assert len(payloads) == 4 and all(len(p) < 8000 for p in payloads)
    written = [entry.split(":") for p in payloads for entry in p.split(",")]
    seqs = {(uuid.UUID(run_id), int(seq)) for run_id, seq in written}
    assert seqs == {(c.run.id, 2) for c in claims} | {(c.run.id, 3) for c in claims}


async def test_detach_subscribers_forgets_many_streams_at_once(queue: Queue, engine: AsyncEngine) -> None:
    runs = [await enqueue(queue) for _ in range(3)]
    streams = [(run_id, uuid.uuid4()) for run_id in runs for _ in range(2)]
    for run_id, subscriber_id in streams:
        await queue.attach_subscriber(run_id=run_id, subscriber_id=subscriber_id)
    await queue.detach_subscribers(streams[:4])
    async with engine.connect() as conn:
        left = (await conn.execute(text("SELECT run_id, subscriber_id FROM run_subscribers"))).all()
        detached = (await conn.execute(text("SELECT id FROM agent_runs WHERE detached_at IS NOT NULL"))).scalars()
        assert sorted(map(tuple, left)) == sorted(streams[4:])
        assert set(detached) == set(runs[:2])


async def test_checkpoint_is_handed_back_on_the_next_claim(queue: Queue, engine: AsyncEngine) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    await queue.append_events(
        run_id=run_id, lease_id=claim.lease_id, state={"step": 2}, events=[("tool.result", {"output": 2})]
    )
    await expire_lease(engine, run_id)
    await queue.reap_expired()
    again = await claim_one(queue)
    assert again.resume_state == {"step": 2}


async def test_effect_ledger_records_once(queue: Queue) -> None:
    run_id = await enqueue(queue)
    claim = await claim_one(queue)
    assert await queue.effects_of(run_id) == {}
    await queue.record_effect(run_id=run_id, lease_id=claim.lease_id, key="email", result={"sent": 1})
    await queue.record_effect(run_id=run_id, lease_id=claim.lease_id, key="email", result={"sent": 2})
    assert await queue.effects_of(run_id) == {"email": {"sent": 1}}


async def test_tenant_cap_skips_tenants_at_their_cap(queue: Queue) -> None:
    queue.tenant_max_inflight = 2
    for _ in range(20):
        await enqueue(queue, tenant_id="big")
    late = await enqueue(queue, tenant_id="small")
    first = await queue.claim_batch(worker_id="w", limit=10)
    assert Counter(c.run.tenant_id for c in first) == {"big": 2, "small": 1}
    assert late in {c.run.id for c in first}
    assert await queue.claim_batch(worker_id="w", limit=10) == []  # both at (or out of) room


async def test_tenant_override_raises_or_lowers_the_cap(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO tenant_limits (tenant_id, max_inflight) VALUES ('big', 1)"))
    for _ in range(5):
        await enqueue(queue, tenant_id="big")
        await enqueue(queue, tenant_id="other")
    claims = await queue.claim_batch(worker_id="w", limit=10)
    assert Counter(c.run.tenant_id for c in claims) == {"big": 1, "other": 5}


async def test_priority_aging_lets_an_old_low_priority_run_overtake(queue: Queue, engine: AsyncEngine) -> None:
    queue.aging_s = 10.0
    old = await enqueue(queue, priority=0)
    async with engine.begin() as conn:  # it has waited 35 s: worth 3.5 priority points
        await conn.execute(
            text(
                "UPDATE agent_runs SET available_at = available_at - interval '35 seconds',"
                " queue_rank = queue_rank - interval '35 seconds' WHERE id = :id"
            ),
            {"id": old},
        )
    high = [await enqueue(queue, priority=p) for p in (5, 3)]
    order = [c.run.id for c in await queue.claim_batch(worker_id="w", limit=3)]
    assert order == [high[0], old, high[1]]


async def test_claim_uses_the_partial_index(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, finished_at)"
                " SELECT 'acme', 'demo', 3, 'done', now() FROM generate_series(1, 5000)"
            )
        )
        await conn.execute(text("ANALYZE agent_runs"))
        plan = "\n".join(
            r[0]
            for r in await conn.execute(
                text(
                    "EXPLAIN SELECT id FROM agent_runs WHERE status = 'pending' AND available_at <= now()"
                    " AND cancel_requested_at IS NULL ORDER BY queue_rank, created_at LIMIT 10"
                    " FOR UPDATE SKIP LOCKED"
                )
            )
        )
    assert "ix_agent_runs_claim" in plan, plan


async def test_a_bulk_enqueue_commits_with_statistics_so_the_claim_walks_its_index(
    queue: Queue, engine: AsyncEngine
) -> None:
    await queue.enqueue_many(tenant_id="acme", agent="demo", inputs=[{}] * 2000)
    async with engine.connect() as conn:
        analyzed = (await conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'agent_runs'"))).scalar()
        plan = "\n".join(r[0] for r in await conn.execute(text("EXPLAIN " + str(CLAIM_BATCH)), CLAIM_PARAMS))
    assert analyzed == 2000
    # Not a bitmap scan of every pending run and a sort: an ordered walk that stops at the limit.
    assert "Index Scan using ix_agent_runs_claim" in plan and "Sort" not in plan, plan


async def test_list_runs_is_newest_first_with_keyset_cursor(queue: Queue) -> None:
    ids = [await enqueue(queue) for _ in range(5)]
    await enqueue(queue, tenant_id="globex")
    page = await queue.list_runs(tenant_id="acme", limit=3)
    assert [r.id for r in page] == ids[::-1][:3]
    rest = await queue.list_runs(tenant_id="acme", limit=3, before=(page[-1].created_at, page[-1].id))
    assert [r.id for r in rest] == ids[::-1][3:]
    assert await queue.list_runs(tenant_id="acme", status=Status.DONE) == []


async def test_purge_removes_only_old_finished_runs(queue: Queue, engine: AsyncEngine) -> None:
    old, recent, live = await enqueue(queue), await enqueue(queue), await enqueue(queue)
    for run_id in (old, recent):
        await queue.request_cancel(run_id, tenant_id="acme")
    async with engine.begin() as conn:
        await conn.execute(
            # created and finished 40 days ago: its events (moved along by the trigger) are in
            # the default partition, which holds no day of its own and is purged row by row
            text(
                "UPDATE agent_runs SET finished_at = now() - CAST(:age AS interval),"
                " created_at = now() - CAST(:age AS interval), history_at = now() - CAST(:age AS interval)"
                " WHERE id = :id"
            ),
            {"age": timedelta(days=40), "id": old},
        )
    assert await queue.purge_finished(older_than_s=30 * 86400) == 1
    with pytest.raises(RunNotFound):
        await queue.get_run(old, tenant_id=None)
    assert (await queue.get_run(recent, tenant_id=None)).status is Status.CANCELLED
    assert (await queue.get_run(live, tenant_id=None)).status is Status.PENDING
    assert await queue.read_events(old) == []
