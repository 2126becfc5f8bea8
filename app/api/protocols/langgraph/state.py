"""A thread's graph state as LangGraph's server shows it: ``values``, ``next``, ``tasks`` with
their ``interrupts``, ``checkpoint``, ``metadata`` and ``parent_checkpoint``, read through the
thread's graph bound to runq's saver."""

from __future__ import annotations

from typing import Any

from app.agents.langgraph_wire import wire_json
from app.api.deps import Runtime
from app.api.problems import ApiProblem
from app.api.protocols.langgraph.graphs import assistants, compiled
from app.domain import Thread

EMPTY_STATE: dict[str, Any] = {
    "values": {},
    "next": [],
    "tasks": [],
    "metadata": {},
    "created_at": None,
    "checkpoint": None,
    "parent_checkpoint": None,
    "interrupts": [],
}


def thread_graph(runtime: Runtime, thread: Thread) -> Any | None:
    """The graph a thread's runs ran (its ``graph_id`` metadata), None before any; 404 when
    that names no graph served here (a client may set the metadata to anything)."""
    graph_id = thread.metadata.get("graph_id")
    if graph_id is None:
        return None
    if graph_id not in {a.graph_id for a in assistants(runtime)}:
        raise ApiProblem(404, "not_found", f"the thread's graph {graph_id!r} is not served here")
    return compiled(runtime, graph_id)


def graph_config(thread: Thread, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    configurable = {"checkpoint_ns": ""} | (checkpoint or {}) | {"thread_id": str(thread.id)}
    return {"configurable": {k: v for k, v in configurable.items() if v is not None}}


def _checkpoint(config: Any) -> dict[str, Any] | None:
    if not config:
        return None
    c = config["configurable"]
    return {
        "thread_id": c["thread_id"],
        "checkpoint_ns": c.get("checkpoint_ns", ""),
        "checkpoint_id": c.get("checkpoint_id"),
        "checkpoint_map": c.get("checkpoint_map"),
    }


def interrupts_json(interrupts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open interrupts as a thread and its state show them: ``{id, value}`` (the values stream
    and ``wait`` show all of an ``Interrupt``'s fields)."""
    return [{"id": i["id"], "value": i["value"]} for i in interrupts]


def state_json(snapshot: Any) -> dict[str, Any]:
    """One ``StateSnapshot`` as LangGraph's server writes it."""
    return {
        "values": wire_json(snapshot.values),
        "next": list(snapshot.next),
        "tasks": [
            {
                "id": t.id,
                "name": t.name,
                "path": wire_json(t.path),
                "error": None if t.error is None else repr(t.error),
                "interrupts": interrupts_json(wire_json(list(t.interrupts))),
                "checkpoint": None,
                "state": None,
                "result": wire_json(t.result),
            }
            for t in snapshot.tasks
        ],
        "metadata": wire_json(snapshot.metadata or {}),
        "created_at": snapshot.created_at,
        "checkpoint": _checkpoint(snapshot.config),
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
        "interrupts": interrupts_json(wire_json(list(snapshot.interrupts))),
    }


async def thread_state(
    runtime: Runtime, thread: Thread, checkpoint: dict[str, Any] | None = None
) -> dict[str, Any]:
    graph = thread_graph(runtime, thread)
    if graph is None:
        return EMPTY_STATE
    snapshot = await graph.aget_state(graph_config(thread, checkpoint))
    if checkpoint and snapshot.config is None:
        raise ApiProblem(404, "not_found", "no such checkpoint of this thread")
    return state_json(snapshot) if snapshot.config is not None else EMPTY_STATE


async def thread_history(
    runtime: Runtime, thread: Thread, *, limit: int, before: Any, metadata: Any, checkpoint: Any
) -> list[dict[str, Any]]:
    graph = thread_graph(runtime, thread)
    if graph is None:
        return []
    if isinstance(before, str):
        before = {"checkpoint_id": before}
    states = graph.aget_state_history(
        graph_config(thread, checkpoint),
        limit=limit,
        before=graph_config(thread, before) if before else None,
        filter=metadata,
    )
    return [state_json(s) async for s in states]


async def update_state(
    runtime: Runtime, thread: Thread, *, values: Any, as_node: str | None, checkpoint: Any
) -> dict[str, Any]:
    """Write the thread's state outside a run (the caller checked that none is in flight)."""
    graph = thread_graph(runtime, thread)
    if graph is None:
        raise ApiProblem(400, "no_graph", "the thread has no graph yet: run it first")
    config = await graph.aupdate_state(graph_config(thread, checkpoint), values, as_node=as_node)
    return {"checkpoint": _checkpoint(config)}
