"""runq's LangGraph saver against LangGraph's own ``AsyncPostgresSaver`` (psycopg), on one
database of the same server in one run: checkpoint put and get latency p50/p99, a 10-node
graph's wall time per run, and the checkpoint rows a thread keeps after many steps.

The savers are sampled alternately (as :mod:`bench.threads` samples its two databases), so both
see the same drift of a shared machine. The graph runs with ``durability="sync"``, as runq's
LangGraph agent runs graphs. ``langgraph-checkpoint-postgres`` 3.2.0 ships no asyncpg saver
(``langgraph.checkpoint.postgres_asyncpg``); the section looks for it and reports it absent.
"""

from __future__ import annotations

import importlib.util
import operator
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph

from app.agents.langgraph import RunqSaver
from app.db.engine import create_engine
from app.db.url import asyncpg_dsn
from app.settings import get_settings
from bench.procs import APP_NAME, connect
from bench.server import BenchServer
from bench.stats import summary

GRAPH_NODES = 10
MESSAGES = 10  # a conversation's worth of state in every checkpoint put
ASYNCPG_SAVER = "langgraph.checkpoint.postgres_asyncpg"


class Trail(TypedDict):
    trail: Annotated[list[str], operator.add]


class Counter(TypedDict):
    n: int


async def compare(server: BenchServer, *, samples: int, graph_runs: int, steps: int) -> dict[str, Any]:
    keep = get_settings().langgraph_keep_checkpoints
    async with server.database("frameworks_langgraph") as url:
        engine = create_engine(url, pool_size=4, application_name=APP_NAME)
        try:
            async with AsyncPostgresSaver.from_conn_string(asyncpg_dsn(url)) as langgraph:
                await langgraph.setup()
                savers: dict[str, BaseCheckpointSaver[Any]] = {
                    "runq": RunqSaver(engine, keep=keep),
                    "langgraph_psycopg": langgraph,
                }
                put = await _alternate(savers, samples, _putter)
                get = await _alternate(savers, samples, _getter)
                graph = await _alternate(savers, graph_runs, _graph_runner)
                rows = {name: await _rows_after(saver, url, steps) for name, saver in savers.items()}
        finally:
            await engine.dispose()
    results: dict[str, Any] = {
        "keep": keep,
        # measured once a release ships it; named here so a run says whether it looked
        "asyncpg_saver": "shipped, not measured" if _has(ASYNCPG_SAVER) else "not shipped",
        "put": put,
        "get": get,
        f"graph_{GRAPH_NODES}_nodes": graph,
        f"rows_after_{steps}_steps": rows,
    }
    results["ratios"] = {
        f"{what}_{q}": round(section["runq"][f"{q}_ms"] / section["langgraph_psycopg"][f"{q}_ms"], 3)
        for what, section in (("put", put), ("get", get), ("graph", graph))
        for q in ("p50", "p99")
    }
    return results


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


Sample = Callable[[BaseCheckpointSaver[Any]], Awaitable[Callable[[], Awaitable[None]]]]


async def _alternate(savers: dict[str, BaseCheckpointSaver[Any]], samples: int, prepare: Sample) -> dict[str, Any]:
    """``samples`` timings of each saver's operation, the savers taking turns to go first."""
    operations = {name: await prepare(saver) for name, saver in savers.items()}
    names = list(operations)
    timings: dict[str, list[float]] = {name: [] for name in names}
    for i in range(samples):
        for name in names[i % 2 :] + names[: i % 2]:
            started = time.perf_counter()
            await operations[name]()
            timings[name].append(time.perf_counter() - started)
    return {name: summary(values) for name, values in timings.items()}


def _checkpoint(step: int) -> Any:
    checkpoint = empty_checkpoint()
    messages = [
        (HumanMessage if i % 2 == 0 else AIMessage)(f"message {i} of step {step}: " + "lorem ipsum " * 15)
        for i in range(MESSAGES)
    ]
    checkpoint["channel_values"] = {"messages": messages, "step": step}
    checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
    return checkpoint


async def _putter(saver: BaseCheckpointSaver[Any]) -> Callable[[], Awaitable[None]]:
    """A put of the next checkpoint of one thread (a new one every 200, so neither thread's
    size, nor runq's pruning of it, is what is measured)."""
    state: dict[str, Any] = {"config": None, "step": 0}

    async def put() -> None:
        step = state["step"]
        if step % 200 == 0:
            state["config"] = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
        checkpoint = _checkpoint(step)
        metadata = {"source": "loop", "step": step, "parents": {}}
        state["config"] = await saver.aput(state["config"], checkpoint, metadata, checkpoint["channel_versions"])
        state["step"] = step + 1

    return put


async def _getter(saver: BaseCheckpointSaver[Any]) -> Callable[[], Awaitable[None]]:
    """A get of a thread's newest checkpoint (ten checkpoints in, two pending writes on it)."""
    config: Any = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
    for step in range(10):
        checkpoint = _checkpoint(step)
        config = await saver.aput(config, checkpoint, {"source": "loop", "step": step, "parents": {}}, checkpoint["channel_versions"])
    await saver.aput_writes(config, [("step", 10), ("messages", [AIMessage("pending")])], "task-1")
    latest = {"configurable": {"thread_id": config["configurable"]["thread_id"], "checkpoint_ns": ""}}

    async def get() -> None:
        if await saver.aget_tuple(latest) is None:
            raise AssertionError("checkpoint missing")

    return get


def _linear_graph() -> StateGraph[Any]:
    builder = StateGraph(Trail)
    names = [f"node_{i}" for i in range(GRAPH_NODES)]
    for previous, name in zip([START, *names], names, strict=False):
        builder.add_node(name, lambda state, name=name: {"trail": [name]})
        builder.add_edge(previous, name)
    builder.add_edge(names[-1], END)
    return builder


async def _graph_runner(saver: BaseCheckpointSaver[Any]) -> Callable[[], Awaitable[None]]:
    graph = _linear_graph().compile(checkpointer=saver)

    async def run() -> None:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        final = await graph.ainvoke({"trail": []}, config, durability="sync")
        if len(final["trail"]) != GRAPH_NODES:
            raise AssertionError(final)

    return run


async def _rows_after(saver: BaseCheckpointSaver[Any], url: str, steps: int) -> dict[str, int]:
    """A looping graph's ``steps`` steps on one thread, then the rows that thread holds."""
    builder = StateGraph(Counter)
    builder.add_node("step", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda state: END if state["n"] >= steps else "step")
    thread_id = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}
    await builder.compile(checkpointer=saver).ainvoke({"n": 0}, config, durability="sync")
    table = "langgraph_checkpoints" if isinstance(saver, RunqSaver) else "checkpoints"
    writes = "langgraph_checkpoint_writes" if isinstance(saver, RunqSaver) else "checkpoint_writes"
    async with connect(url) as conn:
        checkpoints = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE thread_id = $1", thread_id)
        pending = await conn.fetchval(f"SELECT count(*) FROM {writes} WHERE thread_id = $1", thread_id)
    return {"checkpoints": checkpoints, "writes": pending}
