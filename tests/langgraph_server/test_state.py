"""A thread's state over the official Python SDK, against runq's ``/langgraph`` and LangGraph's
own ``langgraph dev`` (DESIGN §17): ``update_state``, runs from an earlier checkpoint (a fork),
a thread no served graph knows. Cases marked ``runq_only`` are where runq is stronger."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.langgraph_server.conftest import Server, runq_only
from tests.langgraph_server.support import collect, frames, gated_run

NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


async def test_update_state_then_run_from_it(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    await lg.runs.wait(thread["thread_id"], "counter", input={"count": 1})
    await lg.threads.update_state(thread["thread_id"], {"count": 5}, as_node="one")
    state = await lg.threads.get_state(thread["thread_id"])
    assert state["values"]["count"] == 5 and state["next"] == ["two"]
    assert (await lg.threads.get(thread["thread_id"]))["values"] == state["values"]
    assert (await lg.runs.wait(thread["thread_id"], "counter", input=None))["count"] == 50


async def test_a_run_from_an_earlier_checkpoint_forks_the_thread(lg: LangGraphClient) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    assert await lg.runs.wait(thread_id, "counter", input={"count": 1}) == {
        "count": 20,
        "steps": ["one", "two"],
    }
    first = (await lg.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
    second = await lg.runs.wait(thread_id, "counter", input={"count": 5})
    assert second == {"count": 60, "steps": ["one", "two", "one", "two"]}
    forked = await lg.runs.wait(thread_id, "counter", input={"count": 2}, checkpoint_id=first)
    assert forked == {"count": 30, "steps": ["one", "two", "one", "two"]}  # on the first's state
    state = await lg.threads.get_state(thread_id)
    assert (state["values"], state["next"]) == (forked, [])
    assert (await lg.threads.get(thread_id))["values"] == forked
    history = await lg.threads.get_history(thread_id, limit=4)  # the fork's: input, 3 steps
    assert history[-1]["metadata"]["source"] == "input"
    assert history[-1]["parent_checkpoint"]["checkpoint_id"] == first
    # The same with ``checkpoint`` (what the SDK sends for a subgraph's too), streamed.
    parts = await collect(
        lg.runs.stream(
            thread_id,
            "counter",
            input={"count": 3},
            checkpoint={"checkpoint_id": first, "checkpoint_ns": ""},
            stream_mode="values",
        )
    )
    assert frames(parts)[-1] == ("values", {"count": 40, "steps": ["one", "two", "one", "two"]})
    # A run after the fork goes on from it (the thread's newest state).
    assert (await lg.runs.wait(thread_id, "counter", input={"count": 0}))["steps"] == [
        "one",
        "two",
    ] * 3


async def test_a_run_from_an_unknown_checkpoint_starts_from_nothing(lg: LangGraphClient) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    await lg.runs.wait(thread_id, "counter", input={"count": 1})
    # LangGraph's saver finds no such checkpoint: the graph starts as on a new thread.
    out = await lg.runs.wait(
        thread_id, "counter", input={"count": 2}, checkpoint_id=str(uuid.uuid4())
    )
    assert out == {"count": 30, "steps": ["one", "two"]}
    assert (await lg.threads.get_state(thread_id))["values"] == out
    with pytest.raises(httpx.HTTPStatusError) as refused:  # not a UUID
        await lg.runs.wait(thread_id, "counter", input={"count": 2}, checkpoint_id="nope")
    assert refused.value.response.status_code == 422


async def test_a_forked_run_whose_worker_died_goes_on_from_the_fork(
    server: Server, lg: LangGraphClient, tmp_path: Path
) -> None:
    runq_only(server, "a retried attempt resumes the fork it began, never forks again")
    assert server.worker is not None
    thread_id = (await lg.threads.create())["thread_id"]
    (tmp_path / "open").touch()
    await lg.runs.wait(thread_id, "gated", input={"gate": str(tmp_path / "open")})
    first = (await lg.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
    await lg.runs.wait(thread_id, "gated", input={"gate": str(tmp_path / "open"), "passed": False})
    gate = tmp_path / "gate"
    run = await gated_run(lg, thread_id, gate, checkpoint_id=first)
    server.worker.kill_and_restart()
    gate.touch()
    assert await lg.runs.join(thread_id, run["run_id"]) == {"gate": str(gate), "passed": True}
    history = await lg.threads.get_history(thread_id, limit=3)  # the fork, forked once
    assert [h["metadata"]["source"] for h in history] == ["loop", "loop", "input"]
    assert history[2]["parent_checkpoint"]["checkpoint_id"] == first


async def test_the_state_of_a_thread_naming_no_served_graph_is_404(lg: LangGraphClient) -> None:
    thread = await lg.threads.create(metadata={"graph_id": "no-such-graph"})
    with pytest.raises(NotFoundError):
        await lg.threads.get_state(thread["thread_id"])
    assert (await lg.threads.get(thread["thread_id"]))["values"] is None
    fresh = await lg.threads.create()
    state = await lg.threads.get_state(fresh["thread_id"])
    assert (state["values"], state["next"], state["tasks"]) == ({}, [], [])
