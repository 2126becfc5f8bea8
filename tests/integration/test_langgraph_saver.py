"""runq's LangGraph saver against the conformance suite LangGraph publishes
(``langgraph-checkpoint-conformance``), as LangGraph's own AsyncPostgresSaver runs it in
``libs/checkpoint-postgres/tests/test_conformance.py``; then what the suite does not know of:
the lease fence and pruning."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.graph import END, START, StateGraph
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.langgraph import RunqSaver
from app.domain import Finish
from app.errors import LeaseLost
from app.queue import Fence, NewRun, Queue
from app.settings import get_settings


async def test_the_whole_conformance_suite_passes(engine: AsyncEngine) -> None:
    @checkpointer_test(name="RunqSaver")
    async def runq_saver() -> AsyncIterator[RunqSaver]:
        yield RunqSaver(engine, keep=get_settings().langgraph_keep_checkpoints)

    report = await validate(runq_saver, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all(), report.results
    assert all(result.detected for result in report.results.values())  # every capability


async def _put(saver: RunqSaver, thread_id: str, parent: dict | None = None, **values: Any) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint = generate_checkpoint(
        channel_values=values, channel_versions=dict.fromkeys(values, 1)
    )
    return await saver.aput(config, checkpoint, generate_metadata(), dict.fromkeys(values, 1))


async def _rows(engine: AsyncEngine, thread_id: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        checkpoints = (
            await conn.execute(
                text("SELECT count(*) FROM langgraph_checkpoints WHERE thread_id = :t"),
                {"t": thread_id},
            )
        ).scalar_one()
        writes = (
            await conn.execute(
                text("SELECT count(*) FROM langgraph_checkpoint_writes WHERE thread_id = :t"),
                {"t": thread_id},
            )
        ).scalar_one()
    return checkpoints, writes


async def test_a_write_under_a_lost_lease_changes_nothing(
    queue: Queue, engine: AsyncEngine
) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    [claim] = await queue.claim_batch(worker_id="w:1:a", limit=1)
    thread_id = str(run.id)
    saver = RunqSaver(engine, fence=Fence(run.id, claim.lease_id))
    first = await _put(saver, thread_id, x=1)
    await saver.aput_writes(first, [("x", 2)], "task-1")

    # the lease expires and another claim takes the run: this one is a zombie now
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_runs SET locked_until = now() - interval '1 s' WHERE id = :id"),
            {"id": run.id},
        )
    await queue.reap_expired()
    [other] = await queue.claim_batch(worker_id="w:2:b", limit=1)
    assert other.lease_id != claim.lease_id

    with pytest.raises(LeaseLost):
        await _put(saver, thread_id, first, x=3)
    with pytest.raises(LeaseLost):
        await saver.aput_writes(first, [("x", 4)], "task-2")
    assert await _rows(engine, thread_id) == (1, 1)
    latest = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}

    # the claim that holds the run writes, and its checkpoints name the run
    holder = RunqSaver(engine, fence=Fence(run.id, other.lease_id))
    await _put(holder, thread_id, first, x=5)
    assert await holder.last_writer(thread_id) == run.id
    assert await RunqSaver(engine).last_writer(str(uuid.uuid4())) is None


async def test_a_purged_run_takes_its_checkpoints_with_it(queue: Queue, engine: AsyncEngine) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    [claim] = await queue.claim_batch(worker_id="w:1:a", limit=1)
    saver = RunqSaver(engine, fence=Fence(run.id, claim.lease_id))
    await saver.aput_writes(await _put(saver, str(run.id), x=1), [("x", 2)], "task-1")
    kept = await _put(RunqSaver(engine), "another-thread", x=1)
    await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.done({}))

    assert await queue.purge_finished(older_than_s=0, everywhere=True) == 1

    assert await _rows(engine, str(run.id)) == (0, 0)
    assert await RunqSaver(engine).aget_tuple(kept) is not None


async def test_each_put_keeps_the_newest_checkpoints(engine: AsyncEngine) -> None:
    saver = RunqSaver(engine, keep=3)
    thread_id = str(uuid.uuid4())
    configs = []
    parent = None
    for step in range(10):
        parent = await _put(saver, thread_id, parent, step=step)
        await saver.aput_writes(parent, [("step", step)], f"task-{step}")
        configs.append(parent)

    kept = [t async for t in saver.alist({"configurable": {"thread_id": thread_id}})]
    assert [t.config for t in kept] == configs[:-4:-1]  # the newest three, newest first
    assert [t.pending_writes for t in kept] == [[(f"task-{s}", "step", s)] for s in (9, 8, 7)]
    assert await _rows(engine, thread_id) == (3, 3)
    # an unpruned saver on the same tables keeps all
    other = str(uuid.uuid4())
    parent = None
    for step in range(5):
        parent = await _put(RunqSaver(engine), other, parent, step=step)
    assert await _rows(engine, other) == (5, 0)


async def test_a_graph_on_the_saver_alone_keeps_the_setting(engine: AsyncEngine) -> None:
    """``compile(checkpointer=RunqSaver(engine, keep=...))`` without runq's worker: a looping
    graph's hundred steps leave ``keep`` checkpoints, and pending writes of those only (the
    bench counts the rows after 1,000 steps)."""
    keep = get_settings().langgraph_keep_checkpoints
    graph = _looping_graph(steps=100).compile(checkpointer=RunqSaver(engine, keep=keep))
    thread_id = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 1000}

    final = await graph.ainvoke({"n": 0}, config)

    assert final == {"n": 100}
    async with engine.connect() as conn:
        checkpoints, orphans = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM langgraph_checkpoints WHERE thread_id = :t),"
                    " (SELECT count(*) FROM langgraph_checkpoint_writes w WHERE thread_id = :t AND NOT EXISTS"
                    "   (SELECT 1 FROM langgraph_checkpoints c WHERE c.thread_id = w.thread_id"
                    "     AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id))"
                ),
                {"t": thread_id},
            )
        ).one()
    assert (checkpoints, orphans) == (keep, 0)
    history = [s async for s in graph.aget_state_history(config)]
    assert len(history) == keep and history[0].values == {"n": 100}


def _looping_graph(*, steps: int) -> StateGraph[Any]:
    class Counter(TypedDict):
        n: int

    def step(state: Counter) -> Counter:
        return {"n": state["n"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step")
    return builder
