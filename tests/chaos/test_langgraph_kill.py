"""LangGraph graphs in real worker processes that die or stall mid-graph: the retry resumes from
the last checkpoint without resending the input, and a zombie writes no checkpoint."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.langgraph import RunqSaver
from app.domain import Status
from app.queue import NewRun, Queue
from tests.chaos.conftest import SpawnWorker, WorkerProcess
from tests.worker_support import check_event_log, wait_finished, wait_until

pytestmark = pytest.mark.chaos

AGENTS = "lg_three=tests.fakes.langgraph_agents:ThreeNodesGraph,lg_zombie=tests.fakes.langgraph_agents:ZombieGraph"


def _spawn(spawn_worker: SpawnWorker, **env: str) -> WorkerProcess:
    """A worker, given time to import LangGraph on a busy machine."""
    return spawn_worker(concurrency=1, ready=False, **env).wait_ready(timeout=120)


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _executions(log: Path, node: str) -> list[str]:
    """The pids that ran ``node`` to its end."""
    return [line.split(" ")[1] for line in _lines(log) if line.split(" ")[0] == node]


async def _started(log: Path, node: str, worker: WorkerProcess) -> None:
    await wait_until(
        lambda: f"{node}-start {worker.pid}" in _lines(log), within=30, what=f"{node} to start"
    )


async def test_a_killed_worker_resumes_at_the_node_that_was_running(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine, tmp_path: Path
) -> None:
    log = tmp_path / "nodes.log"
    env = {"RUNQ_AGENTS": AGENTS, "RUNQ_TEST_LANGGRAPH_LOG": str(log)}
    first = _spawn(spawn_worker, **env)
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="lg_three", input={"prompt": "go"}))
    await _started(log, "three", first)

    async def two_reported() -> bool:  # events are buffered: let two's be written first
        return any(
            e.type == "graph.node" and e.data["node"] == "two"
            for e in await queue.read_events(run.id)
        )

    await wait_until(two_reported, within=30, what="two's graph.node event")
    first.sigkill()
    log.with_suffix(".go").touch()  # the next execution of three may finish
    second = _spawn(spawn_worker, **env)
    done = await wait_finished(queue, run.id, within=60)

    assert done.status is Status.DONE and done.attempts == 2, done
    assert _executions(log, "one") == _executions(log, "two") == [str(first.pid)]
    assert _executions(log, "three") == [str(second.pid)]
    state = done.output["state"]
    assert state["messages"] == [{"role": "user", "content": "go"}]  # the input, sent once
    assert state["steps"] == [
        f"one-by-{first.pid}",
        f"two-by-{first.pid}",
        f"three-by-{second.pid}",
    ]
    events = await queue.read_events(run.id)
    check_event_log(events)
    nodes = [(e.data["node"], e.attempt) for e in events if e.type == "graph.node"]
    assert nodes == [("one", 1), ("two", 1), ("three", 2)]


async def test_a_zombie_writes_no_checkpoint(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine, tmp_path: Path
) -> None:
    log = tmp_path / "nodes.log"
    env = {"RUNQ_AGENTS": AGENTS, "RUNQ_TEST_LANGGRAPH_LOG": str(log), "RUNQ_LEASE_S": "1"}
    zombie = _spawn(spawn_worker, **env)
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="lg_zombie", input={"prompt": "go"}))
    await _started(log, "two", zombie)

    os.kill(zombie.pid, signal.SIGSTOP)  # past its lease: the reaper gives the run to another
    try:
        log.with_suffix(".go").touch()  # the zombie's two finishes as soon as it runs again
        other = _spawn(spawn_worker, **env)
        done = await wait_finished(queue, run.id, within=60)
        saver = RunqSaver(engine)
        config = {"configurable": {"thread_id": str(run.id)}}
        before = [t.checkpoint["id"] async for t in saver.alist(config)]
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    await wait_until(
        lambda: "lease lost" in zombie.log(), within=30, what="the zombie to find its lease lost"
    )

    assert done.status is Status.DONE and done.attempts == 2
    after = [t async for t in saver.alist(config)]
    assert [t.checkpoint["id"] for t in after] == before  # nothing written since
    steps = {s for t in after for s in t.checkpoint["channel_values"].get("steps", [])}
    assert steps == {f"one-by-{zombie.pid}", f"two-by-{other.pid}"}
    assert done.output["state"]["steps"] == [f"one-by-{zombie.pid}", f"two-by-{other.pid}"]
    assert {t.config["configurable"]["thread_id"] for t in after} == {str(run.id)}
    assert uuid.UUID(str(run.id)) == await saver.last_writer(str(run.id))
