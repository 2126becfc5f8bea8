"""run_events by day: partitions made ahead, reads pruned to one partition, (run_id, seq) unique
however the rows move, a run's history moving with it (re-home, requeue).

Partitions are schema, shared by every test of the session: a test that makes one for a day in
the past drops it again, and the days from today on are always left in place.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Finish
from app.queue import NewRun, Queue
from app.queue.events import READ_EVENT_PAGES, READ_EVENTS
from app.queue.partitions import DAYS_AHEAD, partition_name
from app.worker.reaper import reap_once


def today() -> date:
    return datetime.now(UTC).date()


async def scalar(engine: AsyncEngine, sql: str, params: dict[str, object] | None = None) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params or {})).scalar()


async def home_of(engine: AsyncEngine, run_id: uuid.UUID) -> set[str]:
    """The partitions that hold the run's events."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT DISTINCT tableoid::regclass::text FROM run_events WHERE run_id = :id"), {"id": run_id}
        )
        return {r[0] for r in rows}


async def move_history(engine: AsyncEngine, run_id: uuid.UUID, day: date) -> None:
    """As if the run was created on ``day``: its events follow by ON UPDATE CASCADE."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE agent_runs SET created_at = CAST(:at AS timestamptz), history_at = CAST(:at AS timestamptz)"
                " WHERE id = :id"
            ),
            {"at": datetime(day.year, day.month, day.day, 12, tzinfo=UTC), "id": run_id},
        )


@pytest.fixture
async def past_days(queue: Queue, engine: AsyncEngine) -> AsyncIterator[list[date]]:
    """Partitions for three days long gone, dropped again after the test."""
    days = [today() - timedelta(days=n) for n in (50, 49, 48)]
    for day in days:
        assert await queue.create_event_partition(day)
    yield days
    async with engine.begin() as conn:
        for day in days:
            await conn.execute(text(f"DROP TABLE IF EXISTS {partition_name(day)}"))


async def finished_run(queue: Queue, text_: str = "x") -> uuid.UUID:
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w", limit=1)
    await queue.append_events(run_id=run.id, lease_id=claim.lease_id, events=[("message.delta", {"text": text_})] * 3)
    await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.done({"ok": True}))
    return run.id


async def test_partitions_are_made_ahead_and_take_back_what_went_to_the_default(
    queue: Queue, engine: AsyncEngine
) -> None:
    last = today() + timedelta(days=DAYS_AHEAD)
    async with engine.begin() as conn:  # as if the reaper had not run for the last day ahead
        await conn.execute(text(f"DROP TABLE {partition_name(last)}"))
    run_id = await finished_run(queue)
    await move_history(engine, run_id, last)
    assert await home_of(engine, run_id) == {"run_events_default"}  # an insert never fails

    await reap_once(queue, retention_s=0)

    names = [p.name for p in await queue.event_partitions()]
    assert all(partition_name(today() + timedelta(days=n)) in names for n in range(DAYS_AHEAD + 1))
    assert names[-1] == "run_events_default"
    assert await home_of(engine, run_id) == {partition_name(last)}
    assert [e.seq for e in await queue.read_events(run_id)] == [1, 2, 3, 4, 5, 6]
    assert await queue.create_event_partitions(today=today()) == []  # nothing missing: nothing done


async def explain_analyze(engine: AsyncEngine, sql: str, params: dict[str, object]) -> list[str]:
    async with engine.begin() as conn:
        rows = await conn.execute(text(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}"), params)
        return [r[0] for r in rows]


def partitions_read(plan: list[str]) -> set[str]:
    """The partitions of run_events the plan read (pruned ones say "never executed"), after
    checking that each was read through its index (an index or bitmap index scan), never scanned."""
    ran = [line.strip() for line in plan if " on run_events_" in line and "never executed" not in line]
    assert ran and not any("Seq Scan" in line for line in ran), "\n".join(plan)
    assert any("Index Scan" in line for line in ran), "\n".join(plan)
    return {line.split(" on ")[1].split()[0].removesuffix("_pkey") for line in ran}


async def test_reads_touch_only_the_runs_own_partition_through_its_index(
    queue: Queue, engine: AsyncEngine, past_days: list[date]
) -> None:
    runs = [await finished_run(queue, f"run {n}") for n in range(3)]
    for run_id, day in zip(runs, past_days, strict=True):
        await move_history(engine, run_id, day)
    recent = await finished_run(queue)  # today's partition
    async with engine.begin() as conn:  # other runs' history in every one of those days
        await conn.execute(
            text(
                "WITH r AS (INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, history_at)"
                " SELECT 'other', 'demo', 3, 'done', d FROM unnest(CAST(:days AS timestamptz[])) AS d,"
                " generate_series(1, 1000) RETURNING id, history_at)"
                " INSERT INTO run_events (run_id, seq, type, attempt, history_at)"
                " SELECT r.id, s, 'message.delta', 1, r.history_at FROM r, generate_series(1, 20) AS s"
            ),
            {"days": [datetime(d.year, d.month, d.day, 6, tzinfo=UTC) for d in [*past_days, today()]]},
        )
        await conn.execute(text("ANALYZE run_events"))

    plan = await explain_analyze(engine, READ_EVENTS.text, {"run_id": runs[1], "after": 2, "limit": 100})
    assert partitions_read(plan) == {partition_name(past_days[1])}

    cursors = [*runs, recent]
    params = {"run_ids": cursors, "afters": [0] * len(cursors), "limit": 500}
    plan = await explain_analyze(engine, READ_EVENT_PAGES.text, params)
    # each run looked up in its own partition only (run-time pruning per run of the lateral join)
    assert partitions_read(plan) == {*(partition_name(d) for d in past_days), partition_name(today())}
    assert not [line for line in plan if " on run_events_" in line and "loops=1)" not in line and "never" not in line]
    pages = await queue.read_event_pages([(r, 0) for r in cursors], limit=500)
    assert all(p is not None and [s for s, *_ in p.events] == [1, 2, 3, 4, 5, 6] for p in pages)


async def test_no_two_events_of_a_run_ever_share_a_seq(queue: Queue, engine: AsyncEngine) -> None:
    """The primary key is (run_id, seq, history_at); every statement copies history_at from the
    run row (and the triggers move the events with it), so the key is unique per (run_id, seq)
    too: a copy is refused, and writers racing a move never share a seq."""
    run_id = await finished_run(queue)
    copy = "INSERT INTO run_events (run_id, seq, type, attempt, history_at) SELECT id, 2, 'x', 1, history_at"
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(text(f"{copy} FROM agent_runs WHERE id = :id"), {"id": run_id})

    # Every writer at once on one run: the worker's appends, the API's cancel, a re-home that
    # moves the rows between partitions meanwhile; seqs stay 1..N, each once.
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w", limit=1)

    async def append() -> None:
        for _ in range(30):
            await queue.append_events(run_id=run.id, lease_id=claim.lease_id, events=[("message.delta", {})] * 2)

    async def move() -> None:
        for n in range(5):
            await move_history(engine, run.id, today() - timedelta(days=n % 2))
            await asyncio.sleep(0)

    await asyncio.gather(append(), append(), move(), queue.request_cancel(run.id, tenant_id="acme"))
    final = await queue.get_run(run.id, tenant_id=None)
    seqs = [e.seq for e in await queue.read_events(run.id, limit=10_000)]
    assert seqs == list(range(1, final.last_event_seq + 1))
    duplicates = "SELECT count(*) FROM (SELECT 1 FROM run_events GROUP BY run_id, seq HAVING count(*) > 1) d"
    assert await scalar(engine, duplicates) == 0


async def test_a_run_still_going_after_a_day_and_a_requeued_one_move_their_history_to_today(
    queue: Queue, engine: AsyncEngine, past_days: list[date]
) -> None:
    finished = await finished_run(queue)
    going, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await move_history(engine, going.id, past_days[0])
    await move_history(engine, finished, past_days[1])
    async with engine.begin() as conn:  # make it dead, so it can be requeued
        await conn.execute(text("UPDATE agent_runs SET status = 'dead' WHERE id = :id"), {"id": finished})

    assert await queue.rehome_unfinished() == 1
    assert await home_of(engine, going.id) == {partition_name(today())}
    assert await home_of(engine, finished) == {partition_name(past_days[1])}  # finished: stays

    requeued = await queue.requeue(finished)
    assert await home_of(engine, finished) == {partition_name(today())}
    types = [e.type for e in await queue.read_events(finished)]
    assert types[0] == "run.queued" and types[-1] == "run.queued" and len(types) == requeued.last_event_seq

    # Nothing still going is left in those days: expired, they are dropped whole.
    dropped = await queue.drop_expired_partitions(older_than_s=30 * 86400)
    assert set(dropped) >= {partition_name(d) for d in past_days}


async def test_a_leased_run_older_than_a_day_holds_its_partition_until_it_moves_to_today(
    queue: Queue, engine: AsyncEngine, past_days: list[date]
) -> None:
    """ix_agent_runs_unfinished leaves leased runs out (migration 0021): the drop's check and
    the re-homing find them through ix_agent_runs_leased."""
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="w", limit=1)
    await queue.append_events(run_id=run.id, lease_id=claim.lease_id, events=[("message.delta", {})])
    pending, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    await move_history(engine, run.id, past_days[1])
    await move_history(engine, pending.id, past_days[2])

    # The oldest day holds nothing still going and goes; the leased run's day stays, and so
    # does every later one (they are dropped oldest first).
    dropped = await queue.drop_expired_partitions(older_than_s=30 * 86400)
    assert partition_name(past_days[0]) in dropped
    assert not {partition_name(d) for d in past_days[1:]} & set(dropped)

    assert await queue.rehome_unfinished() == 2
    assert await home_of(engine, run.id) == await home_of(engine, pending.id) == {partition_name(today())}
    # Still leased under the same lease: its next events and its ending go to today's partition.
    await queue.append_events(run_id=run.id, lease_id=claim.lease_id, events=[("message.delta", {})])
    await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.done({"ok": True}))
    assert await home_of(engine, run.id) == {partition_name(today())}
    assert [e.seq for e in await queue.read_events(run.id)] == [1, 2, 3, 4, 5]

    dropped = await queue.drop_expired_partitions(older_than_s=30 * 86400)
    assert {partition_name(d) for d in past_days[1:]} <= set(dropped)
