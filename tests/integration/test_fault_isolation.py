"""One run's bad data costs no other run anything (docs/reliability.md, "Faults stay where they
start").

Hundreds of good runs share a worker of many slots, so their writes share statements, with runs
that hand runq a value it cannot store — a dict key JSON cannot hold, an object JSON lacks, a
value over ``RUNQ_MAX_DATA_BYTES`` — as an event, the output, a checkpoint, an effect record or a
wait's payload, some of them catching the error and going on as if nothing happened. Others hand
it what has a documented stand-in (NaN, NUL, a lone surrogate) and go on. Every good run ends
done, once, its log gapless and whole; every bad run ends dead ``invalid_data`` within seconds,
never retried; the stand-ins are stored and their runs finish; no run is left leased.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.base import RunContext
from app.domain import Run, Status
from app.errors import LeaseLost
from app.queue import NewRun, Queue
from tests.worker_support import check_event_log, enqueue_demo, in_process_worker, wait_until

LIMIT = 64 * 1024  # RUNQ_MAX_DATA_BYTES of the worker under test
AGENTS = {"faulty": "tests.integration.test_fault_isolation:FaultyAgent"}
PLACES = ("event", "output", "checkpoint", "effect", "wait")
UNSTORABLE = ("tuple_key", "object", "oversize")
STAND_INS = {"nan": (float("nan"), None), "nul": ("a\x00b", "a\ufffdb"), "surrogate": ("x\ud800", "x\ufffd")}
EXECUTIONS: dict[str, int] = {}  # run marker -> effect bodies run (once each, whatever the retries)


def unstorable(kind: str) -> Any:
    match kind:
        case "tuple_key":
            return {("x", 1): 2}
        case "object":
            return {"o": object()}
        case "oversize":
            return "x" * (LIMIT + 1)
        case "huge":  # past the default RUNQ_MAX_DATA_BYTES
            return "x" * 9_000_000
    return STAND_INS[kind][0]


class FaultyAgent:
    """Input ``{marker, kind, place, swallow}``: a good run (``kind`` "good") streams, calls a
    tool, checkpoints, records an effect and answers; another hands the value of ``kind`` at
    ``place`` (catching the error and going on with ``swallow``)."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        marker, kind, place = ctx.input["marker"], ctx.input["kind"], ctx.input.get("place")
        value = None if kind == "good" else unstorable(kind)

        def at(here: str, good: Any) -> Any:
            return value if place == here else good

        for word in ("hello ", "from ", marker):
            await ctx.emit("message.delta", {"text": word})
            await asyncio.sleep(random.uniform(0, 0.02))
        await ctx.emit("message.completed", {"text": f"hello from {marker}"})
        await ctx.emit("tool.call", {"tool_call_id": marker, "name": "work", "arguments": {}})
        await self._guarded(ctx, ctx.emit("tool.result", {"tool_call_id": marker, "output": at("event", "ok")}))
        await self._guarded(ctx, ctx.checkpoint({"step": at("checkpoint", 1)}))

        async def body() -> Any:
            EXECUTIONS[marker] = EXECUTIONS.get(marker, 0) + 1
            return at("effect", {"paid": marker})

        recorded = await self._guarded(ctx, ctx.effect("pay", body))
        if place == "wait":
            await self._guarded(ctx, ctx.wait_for("approval", payload=at("wait", None)))
        await ctx.emit("tool.result", {"tool_call_id": "after", "output": recorded})
        return {"text": at("output", marker)}

    async def _guarded(self, ctx: RunContext, call: Any) -> Any:
        """The call, its error swallowed when the input asks (the run must fail all the same)."""
        if not ctx.input.get("swallow"):
            return await call
        try:
            return await call
        except Exception:
            return None


def plan(rng: random.Random, good: int) -> list[dict[str, Any]]:
    """Good runs with every bad kind at every place (swallowed or not) and the stand-ins, shuffled."""
    inputs: list[dict[str, Any]] = [{"kind": "good"} for _ in range(good)]
    inputs += [{"kind": k, "place": p, "swallow": s} for k in UNSTORABLE for p in PLACES for s in (False, True)]
    inputs += [{"kind": k, "place": p} for k in STAND_INS for p in ("event", "output", "checkpoint", "effect")]
    rng.shuffle(inputs)
    return [{**i, "marker": f"m{n}"} for n, i in enumerate(inputs)]


async def finished_runs(queue: Queue, ids: list[uuid.UUID]) -> list[Run] | None:
    runs = [await queue.get_run(i, tenant_id=None) for i in ids]
    return runs if all(r.is_terminal for r in runs) else None


async def test_bad_data_fails_its_own_run_only(database_url: str, queue: Queue, engine: AsyncEngine) -> None:
    inputs = plan(random.Random(42), good=240)
    async with in_process_worker(database_url, concurrency=96, agents=AGENTS, max_data_bytes=LIMIT):
        runs = [await enqueue_demo(queue, agent="faulty", **i) for i in inputs]
        done = await wait_until(lambda: finished_runs(queue, [r.id for r in runs]), within=120, what="every run to end")
    by_marker = {i["marker"]: (i, run) for i, run in zip(inputs, done, strict=True)}
    for marker, (given, run) in by_marker.items():
        events = await queue.read_events(run.id)
        if given["kind"] == "good" or given["kind"] in STAND_INS:
            assert (run.status, run.attempts) == (Status.DONE, 1), (given, run.error_code, run.error_message)
            check_event_log(events)
            assert EXECUTIONS[marker] == 1
            texts = [e.data["text"] for e in events if e.type == "message.delta"]
            assert "".join(texts) == f"hello from {marker}"
            results = [e.data["output"] for e in events if e.type == "tool.result"]
            stand_in = STAND_INS[given["kind"]][1] if given["kind"] in STAND_INS else None
            assert results[0] == (stand_in if given.get("place") == "event" else "ok")
            expected_effect = {"paid": marker}
            if given.get("place") == "effect":
                expected_effect = stand_in
            assert results[1] == expected_effect
            assert run.output == {"text": stand_in if given.get("place") == "output" else marker}
        else:
            assert (run.status, run.error_code, run.attempts) == (Status.DEAD, "invalid_data", 1), given
            assert run.error_message and ("JSON" in run.error_message or "RUNQ_MAX_DATA_BYTES" in run.error_message
                                          or "key" in run.error_message), run.error_message
            assert run.finished_at is not None and run.finished_at - run.created_at < timedelta(seconds=20)
            assert [e.type for e in events][-1] == "run.failed"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM agent_runs WHERE status = 'leased'"))).scalar() == 0


async def test_the_default_limit_refuses_a_huge_event_at_once(database_url: str, queue: Queue) -> None:
    """With the default RUNQ_MAX_DATA_BYTES (8 MiB), a 9 MB event fails its run in a moment;
    the runs beside it go on."""
    async with in_process_worker(database_url, concurrency=8, agents=AGENTS):
        huge = await enqueue_demo(queue, agent="faulty", marker="huge", kind="huge", place="event")
        neighbours = [await enqueue_demo(queue, agent="faulty", marker=f"n{i}", kind="good") for i in range(6)]
        ended = await wait_until(
            lambda: finished_runs(queue, [huge.id, *(n.id for n in neighbours)]), within=30, what="the runs to end"
        )
    failed, *others = ended
    assert (failed.status, failed.error_code) == (Status.DEAD, "invalid_data")
    assert "8.0 MiB" in (failed.error_message or "")
    assert failed.finished_at is not None and failed.finished_at - failed.created_at < timedelta(seconds=10)
    assert all(r.status is Status.DONE and r.attempts == 1 for r in others)


@pytest.fixture
async def refusing_run(engine: AsyncEngine):  # type: ignore[no-untyped-def]
    """A trigger that makes PostgreSQL refuse any event of one run (as it would a value it
    cannot hold), installed for one test."""
    marker_id: dict[str, str] = {}

    async def refuse(run_id: uuid.UUID) -> None:
        marker_id["id"] = str(run_id)
        async with engine.begin() as conn:
            await conn.execute(text(
                "CREATE OR REPLACE FUNCTION test_refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN RAISE EXCEPTION 'this value cannot be stored' USING ERRCODE = '22023'; END $$"
            ))
            await conn.execute(text(
                f"CREATE TRIGGER test_refuse_event BEFORE INSERT ON run_events FOR EACH ROW"
                f" WHEN (NEW.run_id = '{run_id}' AND NEW.type = 'tool.result') EXECUTE FUNCTION test_refuse_event()"
            ))

    yield refuse
    async with engine.begin() as conn:
        await conn.execute(text("DROP TRIGGER IF EXISTS test_refuse_event ON run_events"))
        await conn.execute(text("DROP FUNCTION IF EXISTS test_refuse_event()"))


async def test_a_statement_postgresql_refuses_is_split_until_the_run_at_fault_is_alone(
    database_url: str, queue: Queue, refusing_run  # type: ignore[no-untyped-def]
) -> None:
    inputs = [{"marker": f"s{i}", "kind": "good"} for i in range(40)]
    runs = [await enqueue_demo(queue, agent="faulty", **i) for i in inputs]
    await refusing_run(runs[17].id)
    async with in_process_worker(database_url, concurrency=48, agents=AGENTS):
        ended = await wait_until(lambda: finished_runs(queue, [r.id for r in runs]), within=60, what="every run to end")
    for i, run in enumerate(ended):
        if i == 17:
            assert (run.status, run.error_code, run.attempts) == (Status.DEAD, "invalid_data", 1)
            assert "PostgreSQL refused" in (run.error_message or "")
            continue
        assert (run.status, run.attempts) == (Status.DONE, 1), (run.error_code, run.error_message)
        events = await queue.read_events(run.id)
        check_event_log(events)
        assert [e.type for e in events].count("tool.result") == 2


async def test_a_zombies_ledger_record_never_lands_after_the_reaper_moved_its_lease_on(
    queue: Queue, engine: AsyncEngine
) -> None:
    """The record's statement holds the run's row: it waits for the reaper's transaction, then
    finds the lease gone and writes nothing (no record of a zombie is replayed later)."""
    run = await enqueue_demo(queue)
    [zombie] = await queue.claim_batch(worker_id="w", limit=1)
    async with engine.connect() as reaper:
        await reaper.execute(text("BEGIN"))
        await reaper.execute(
            text("UPDATE agent_runs SET status = 'pending', lease_id = NULL, locked_until = NULL WHERE id = :id"),
            {"id": run.id},
        )
        record = asyncio.create_task(
            queue.record_effect(run_id=run.id, lease_id=zombie.lease_id, key="charge", result={"paid": 1})
        )
        await wait_until(lambda: _waiting_for_a_lock(engine), within=10, what="the record to wait for the row")
        await reaper.execute(text("COMMIT"))
    with pytest.raises(LeaseLost):
        await record
    assert await queue.effects_of(run.id) == {}


async def _waiting_for_a_lock(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        return bool((await conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ))).scalar())


async def test_an_effect_whose_key_holds_a_record_returns_the_stored_one(queue: Queue) -> None:
    run = await enqueue_demo(queue)
    [claim] = await queue.claim_batch(worker_id="w", limit=1)
    first = await queue.record_effect(run_id=run.id, lease_id=claim.lease_id, key="charge", result={"id": "ch_1"})
    again = await queue.record_effect(run_id=run.id, lease_id=claim.lease_id, key="charge", result={"id": "ch_2"})
    assert first == again == {"id": "ch_1"}
    assert await queue.effects_of(run.id) == {"charge": {"id": "ch_1"}}


class BadMessageAgent:
    """Adds a thread message it cannot store (``bad``), or a plain one."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        content: Any = {("x", 1): 2} if ctx.input.get("bad") else "fine"
        await ctx.add_messages([{"role": "assistant", "content": content}])
        await ctx.checkpoint({"added": True})
        return {"text": "ok"}


async def test_a_thread_message_that_cannot_be_stored_fails_its_run_and_leaves_the_thread_whole(
    database_url: str, queue: Queue
) -> None:
    thread, _ = await queue.create_thread(tenant_id="t1", metadata={})
    agents = {**AGENTS, "messages": "tests.integration.test_fault_isolation:BadMessageAgent"}
    async with in_process_worker(database_url, agents=agents):
        bad, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id="t1", agent="messages", input={"bad": True}))
        good, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id="t1", agent="messages", input={}))
        failed, done = await wait_until(lambda: finished_runs(queue, [bad.id, good.id]), within=30, what="both runs")
    assert (failed.status, failed.error_code) == (Status.DEAD, "invalid_data") and "thread message" in str(failed.error_message)
    assert done.status is Status.DONE
    history = await queue.thread_messages(thread.id, tenant_id="t1")
    assert [(m.message["content"], m.run_id) for m in history] == [("fine", good.id)]
