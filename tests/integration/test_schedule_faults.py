"""A bad schedule row never stops the others (docs/schedules.md, "When a schedule cannot fire"):
a schedule whose slot cannot be computed, or whose run PostgreSQL refuses, is parked with its
reason beside the good schedules of other tenants, which fire; fixed, it fires again and its
error is gone. And a schedule's runs take their tenant's create rate like any create.

The bad rows are written in SQL, as tzdata drift or an operator's edit would leave them; time
moves in SQL (``next_run_at``, ``not_before``, the bucket's ``refilled_at`` set back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cron import Timing
from app.domain import Schedule
from app.errors import LimitExceeded
from app.metrics import MAINTENANCE_ERRORS
from app.queue import LimitDefaults, Queue
from tests.integration.test_hooks_cli import runq
from tests.integration.test_schedules_firing import runs_of, set_due
from tests.worker_support import in_process_worker, wait_until


async def every(queue: Queue, tenant_id: str, seconds: float = 60, *, agent: str = "demo") -> Schedule:
    return await queue.create_schedule(
        tenant_id=tenant_id, timing=Timing(cron=None, every_s=seconds).check(), agent=agent,
        input={"steps": 0}, budget={}, priority=0, max_attempts=1,
    )  # fmt: skip


async def bad_row(engine: AsyncEngine, tenant_id: str, *, cron: str, timezone: str) -> uuid.UUID:
    """A due cron schedule written straight into the table, past the API's checks."""
    schedule_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO schedules (id, tenant_id, cron, timezone, agent, max_attempts, next_run_at)"
                " VALUES (:id, :tenant, :cron, :zone, 'demo', 1, now() - interval '1 second')"
            ),
            {"id": schedule_id, "tenant": tenant_id, "cron": cron, "zone": timezone},
        )
    return schedule_id


async def a_minute_passes(engine: AsyncEngine, schedule_id: uuid.UUID) -> None:
    """The parked schedule's wait is over (and its slot still due)."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE schedules SET not_before = now(), next_run_at = now() - interval '1 second' WHERE id = :id"),
            {"id": schedule_id},
        )


def parked_errors() -> float:
    return MAINTENANCE_ERRORS.labels(step="schedules")._value.get()


# A time zone a worker's tzdata lacks (drift between hosts), and an expression that parses no longer.
UNCOMPUTABLE = {
    "zone": ("0 * * * *", "Mars/Olympus_Mons", "Mars/Olympus_Mons"),
    "cron": ("61 * * * *", "UTC", "minute"),
}


@pytest.mark.parametrize("kind", sorted(UNCOMPUTABLE))
async def test_a_schedule_whose_slot_cannot_be_computed_is_parked_and_the_others_fire(
    kind: str, queue: Queue, engine: AsyncEngine, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    cron, zone, named = UNCOMPUTABLE[kind]
    good = [await every(queue, tenant) for tenant in ("alice", "bob")]
    for schedule in good:
        await set_due(engine, schedule.id)
    bad = await bad_row(engine, "carol", cron=cron, timezone=zone)
    counted = parked_errors()

    with caplog.at_level(logging.DEBUG, logger="app.queue.rowwise"):
        fired = await queue.fire_due_schedules()
    assert {s.id for s in good} == {s for s, _ in fired.runs} == {s for s, _ in await _runs(queue)}
    parked = await queue.get_schedule(bad, tenant_id="carol")
    assert parked.error is not None and named in parked.error and parked.error_at is not None
    assert fired.parked == {bad: parked.error}
    assert parked.last_run_id is None and await runs_of(engine, bad) == []
    assert parked_errors() == counted + 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(bad) in errors[0].getMessage()

    # parked: the next passes leave it alone, so it never heads the due schedules
    assert (await queue.fire_due_schedules()).parked == {}
    assert 50 < await _parked_for_s(engine, bad) <= 60
    # still broken a minute later: parked again, counted again, not logged as news
    await a_minute_passes(engine, bad)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="app.queue.rowwise"):
        assert list((await queue.fire_due_schedules()).parked) == [bad]
    assert parked_errors() == counted + 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    listed = json.loads(runq(database_url, "schedules", "list", "--json").stdout)
    assert {s["id"]: s["error"] for s in listed}[str(bad)] == parked.error
    assert "ERROR" in runq(database_url, "schedules", "list").stdout

    async with engine.begin() as conn:  # fixed by hand
        await conn.execute(text("UPDATE schedules SET cron = '0 * * * *', timezone = 'UTC' WHERE id = :id"), {"id": bad})
    await a_minute_passes(engine, bad)
    fired = await queue.fire_due_schedules()
    assert [s for s, _ in fired.runs] == [bad] and fired.parked == {}
    fixed = await queue.get_schedule(bad, tenant_id="carol")
    assert (fixed.error, fixed.error_at, fixed.last_run_id) == (None, None, fired.runs[0][1])
    assert fixed.next_run_at > parked.next_run_at


async def _runs(queue: Queue) -> list[tuple[uuid.UUID, uuid.UUID]]:
    return [(run.schedule_id, run.id) for run in await queue.list_runs(tenant_id=None) if run.schedule_id]


async def _parked_for_s(engine: AsyncEngine, schedule_id: uuid.UUID) -> float:
    async with engine.connect() as conn:
        query = text("SELECT extract(epoch FROM not_before - now())::float8 FROM schedules WHERE id = :id")
        return float((await conn.execute(query, {"id": schedule_id})).scalar_one())


@contextlib.asynccontextmanager
async def refusing_runs_of(engine: AsyncEngine, agent: str) -> AsyncIterator[None]:
    """PostgreSQL refuses every run of ``agent`` (a trigger), as it would a value it cannot hold."""
    async with engine.begin() as conn:
        await conn.execute(text(
            "CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.agent = '{agent}' THEN RAISE EXCEPTION 'no runs of %', NEW.agent; END IF;"
            " RETURN NEW; END $$"
        ))  # fmt: skip
        await conn.execute(
            text("CREATE TRIGGER test_refuse_run BEFORE INSERT ON agent_runs FOR EACH ROW EXECUTE FUNCTION test_refuse_run()")
        )
    try:
        yield
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("DROP TRIGGER test_refuse_run ON agent_runs"))
            await conn.execute(text("DROP FUNCTION test_refuse_run()"))


async def test_a_run_postgresql_refuses_is_parked_the_others_fire_and_keep_their_tokens(
    queue: Queue, engine: AsyncEngine
) -> None:
    """The batch is redone without the refused row (savepoints, halves); the refused attempts
    give their create tokens back, since the admission rides the same statement."""
    await queue.set_tenant_limits("alice", {"create_per_s": 0.001, "create_burst": 10})
    good = [await every(queue, tenant) for tenant in ("alice", "alice", "bob", "bob", "bob")]
    bad = await every(queue, "alice", agent="refused")
    for schedule in [*good, bad]:
        await set_due(engine, schedule.id)
    async with refusing_runs_of(engine, "refused"):
        fired = await queue.fire_due_schedules()
    assert {s for s, _ in fired.runs} == {s.id for s in good}
    assert fired.parked == {bad.id: "PostgreSQL refused its run: no runs of refused"}
    assert (await queue.get_schedule(bad.id, tenant_id=None)).error == fired.parked[bad.id]
    (alice,) = await queue.tenant_use(tenant_id="alice", limit=1)
    assert alice.tokens == pytest.approx(8, abs=0.01)  # two creates counted, not the refused ones

    await a_minute_passes(engine, bad.id)  # the trigger is gone: it fires
    assert [s for s, _ in (await queue.fire_due_schedules()).runs] == [bad.id]
    assert (await queue.get_schedule(bad.id, tenant_id=None)).error is None


async def test_a_slot_without_a_create_token_waits_for_one_in_turn(queue: Queue, engine: AsyncEngine) -> None:
    """Refused by the bucket, a slot stays due, is not looked at before the Retry-After (the
    reaper sleeps till then), and is created when a token is free: the oldest slot first."""
    await queue.set_tenant_limits("alice", {"create_per_s": 0.5, "create_burst": 1})
    schedules = [await every(queue, "alice") for _ in range(3)]
    for ago, schedule in enumerate(schedules):
        await set_due(engine, schedule.id, ago_s=ago + 1)  # the last one's slot is the oldest
    order = []
    for _ in schedules:
        fired = await queue.fire_due_schedules()
        order += [s for s, _ in fired.runs]
        assert len(fired.runs) == 1 and fired.held == len(schedules) - len(order)
        due_in = await queue.next_schedule_due_in()
        if fired.held:
            assert due_in is not None and 1 < due_in <= 2  # the bucket's Retry-After, no spin
            assert (await queue.fire_due_schedules()).runs == []
            async with engine.begin() as conn:  # two seconds pass
                await conn.execute(text("UPDATE schedules SET not_before = not_before - interval '2 seconds'"))
                await conn.execute(text("UPDATE tenant_buckets SET refilled_at = refilled_at - interval '2 seconds'"))
    assert order == [s.id for s in reversed(schedules)]


async def test_many_interval_schedules_make_runs_at_the_tenants_rate(
    database_url: str, queue: Queue, engine: AsyncEngine
) -> None:
    rate, burst, wanted = 2.0, 2, 8
    await queue.set_tenant_limits("alice", {"create_per_s": rate, "create_burst": burst})
    schedules = [await every(queue, "alice", 1) for _ in range(10)]  # ten runs a second wanted
    other = await every(queue, "bob", 1)
    async with in_process_worker(database_url, concurrency=4, reaper_s=0.05):
        for schedule in [*schedules, other]:
            await set_due(engine, schedule.id)
        created = await wait_until(lambda: _created_at(engine, "alice", wanted), within=30, what=f"{wanted} runs")
        await queue.set_schedule_paused(other.id, tenant_id=None, paused=True)
    first = created[0]
    for k, at in enumerate(created, start=1):  # never ahead of the bucket
        # created_at is its pass's start, a little before its admission: half a run of slack
        assert k <= burst + rate * (at - first) + 0.5, (k, at - first)
    assert len(await runs_of(engine, other.id)) >= 2  # another tenant's schedule is not held back
    slots = await _slot_keys(engine, "alice")
    assert len(slots) == len(set(slots))


async def _created_at(engine: AsyncEngine, tenant_id: str, at_least: int) -> list[float] | None:
    async with engine.connect() as conn:
        query = text("SELECT extract(epoch FROM created_at)::float8 FROM agent_runs WHERE tenant_id = :t ORDER BY created_at")
        found = [float(r[0]) for r in await conn.execute(query, {"t": tenant_id})]
    return found if len(found) >= at_least else None


async def _slot_keys(engine: AsyncEngine, tenant_id: str) -> list[str]:
    async with engine.connect() as conn:
        query = text("SELECT idempotency_key FROM agent_runs WHERE tenant_id = :t")
        return [r[0] for r in await conn.execute(query, {"t": tenant_id})]


async def test_concurrent_creates_cannot_pass_max_schedules(engine: AsyncEngine) -> None:
    """Eight creates at once, each from its own queue (as from eight API processes): three made."""
    queues = [Queue(engine, limits=LimitDefaults(max_schedules=3)) for _ in range(8)]
    results = await asyncio.gather(*(every(q, "alice") for q in queues), return_exceptions=True)
    made = [r for r in results if isinstance(r, Schedule)]
    refused = [r for r in results if isinstance(r, LimitExceeded)]
    assert (len(made), len(refused)) == (3, 5)
    assert {(r.limit, r.code, r.quota) for r in refused} == {("schedules", "too_many_schedules", 3)}
    await every(queues[0], "bob")  # another tenant counts its own
    await queues[0].delete_schedule(made[0].id, tenant_id="alice")
    assert (await every(Queue(engine, limits=LimitDefaults(max_schedules=3)), "alice")).tenant_id == "alice"
    unlimited = Queue(engine, limits=LimitDefaults(max_schedules=0))
    assert len([await every(unlimited, "alice") for _ in range(2)]) == 2
