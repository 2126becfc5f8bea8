"""PydanticAI agents (DESIGN §14.1) end to end: real worker processes, real PostgreSQL, the fake
model server. The agents are in tests/fakes/pydantic_agents.py, registered with RUNQ_AGENTS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.domain import Event, Run, Status, Strategy
from app.queue import NewRun, Queue
from tests.fakes import eventually
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls, stall
from tests.fakes.pydantic_agents import AGENTS

ROOT = Path(__file__).resolve().parents[2]
TENANT = "t1"
WITHIN_S = 120  # a ceiling for a loaded machine, where a worker process may take long to start

StartWorker = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeOpenAI) -> FakeOpenAI:
    shared_server.reset()
    return shared_server


@pytest.fixture
def start_worker(database_url: str, server: FakeOpenAI, tmp_path: Path) -> Iterator[StartWorker]:
    """``python -m app.worker`` processes with short timings, stopped at the end."""
    env = os.environ | {
        "RUNQ_DATABASE_URL": database_url,
        "RUNQ_OPENAI_BASE_URL": server.base_url,
        "RUNQ_OPENAI_API_KEY": "sk-test-0123456789abcdefghij",
        "RUNQ_AGENTS": AGENTS,
        "RUNQ_LEASE_S": "1.5",
        "RUNQ_HEARTBEAT_S": "0.3",
        "RUNQ_POLL_S": "0.1",
        "RUNQ_REAPER_S": "0.2",
        "RUNQ_RETRY_BASE_S": "0.1",
        "RUNQ_RETRY_MAX_S": "1",
        "RUNQ_SHUTDOWN_GRACE_S": "1",
    }
    workers: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with (tmp_path / f"worker-{len(workers)}.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "app.worker", "--concurrency", "2"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        if worker.poll() is None:
            worker.terminate()
    for worker in workers:
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


async def _enqueue(queue: Queue, agent: str, input: dict[str, Any], **fields: Any) -> uuid.UUID:
    run, _ = await queue.enqueue(NewRun(tenant_id=TENANT, agent=agent, input=input, max_attempts=3, **fields))
    return run.id


async def _finished(queue: Queue, run_id: uuid.UUID, status: Status) -> Run:
    async def probe() -> Run | None:
        run = await queue.get_run(run_id, tenant_id=TENANT)
        if run.is_terminal and run.status is not status:
            raise AssertionError(f"run ended {run.status}: {run.error_code} {run.error_message}")
        return run if run.status is status else None

    return await eventually(probe, within_s=WITHIN_S)


async def _events(queue: Queue, run_id: uuid.UUID, type: str | None = None) -> list[Event]:
    return [e for e in await queue.read_events(run_id) if type is None or e.type == type]


async def _waiting(queue: Queue, run_id: uuid.UUID, occurrence: int) -> dict[str, Any]:
    """The run's open waitpoint once it waits for its ``occurrence``-th time."""

    async def probe() -> dict[str, Any] | None:
        run = await queue.get_run(run_id, tenant_id=TENANT)
        if run.is_terminal:
            raise AssertionError(f"run ended {run.status}: {run.error_code} {run.error_message}")
        waits = await _events(queue, run_id, "run.waiting")
        return run.waitpoint if run.status is Status.WAITING and len(waits) == occurrence else None

    point: dict[str, Any] = await eventually(probe, within_s=WITHIN_S)
    return point


async def test_a_tool_using_agent_writes_the_openai_agents_events(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        calls(ToolCall("c1", "add", {"a": 20, "b": 22}), text="Adding.", usage=(10, 5)),
        answer("It is 42.", usage=(20, 7)),
    )
    start_worker()
    run_id = await _enqueue(queue, "support", {"prompt": "what is 20+22?"})

    run = await _finished(queue, run_id, Status.DONE)

    assert run.output == {"text": "It is 42."}
    events = await _events(queue, run_id)
    assert [e.type for e in events if e.type != "message.delta"] == [
        "run.queued", "run.started", "message.completed", "tool.call", "tool.result", "message.completed", "run.completed",
    ]  # fmt: skip
    assert "".join(e.data["text"] for e in events if e.type == "message.delta") == "Adding.It is 42."
    by_type = {e.type: e.data for e in events}
    assert by_type["tool.call"] == {"tool_call_id": "c1", "name": "add", "arguments": {"a": 20, "b": 22}}
    assert by_type["tool.result"] == {"tool_call_id": "c1", "name": "add", "output": 42, "is_error": False}
    assert run.usage.as_dict() == {"input_tokens": 30, "output_tokens": 12, "model_calls": 2, "tool_calls": 1}


async def test_max_turns_holds_across_a_retried_attempt(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    """The retried attempt replays the first model step (stored with its usage) and counts on
    from it: two turns in all, whatever the attempts."""
    server.script(
        calls(ToolCall("l1", "lookup", {"key": "a"})),
        calls(ToolCall("l2", "lookup", {"key": "b"})),
        answer("never"),
    )
    start_worker()
    run_id = await _enqueue(queue, "breaking", {"prompt": "look two things up"}, budget={"max_turns": 2})

    run = await _finished(queue, run_id, Status.DEAD)

    assert (run.error_code, run.attempts) == ("budget_exceeded", 2), run.error_message
    assert len(server.requests) == 2
    assert run.usage.model_calls == 2


@pytest.mark.chaos
async def test_sigkill_after_a_tool_result_replays_the_recorded_steps(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(ToolCall("c1", "record", {"path": str(notes), "note": "once"}), usage=(10, 5)),
        stall("Let me think"),  # the second request streams, then hangs: the worker dies here
        answer("Recorded once.", usage=(20, 7)),
    )
    doomed = start_worker()
    run_id = await _enqueue(queue, "support", {"prompt": "record a note"})
    await eventually(lambda: len(server.requests) == 2, within_s=WITHIN_S)  # the tool's result is recorded by now

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    start_worker()  # reclaims the run once the dead worker's lease has expired

    run = await _finished(queue, run_id, Status.DONE)
    assert run.output == {"text": "Recorded once."} and run.attempts == 2
    assert notes.read_text() == "once\n"  # the tool ran once
    assert len(server.requests) == 3  # the first model request was not sent again
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]
    assert run.usage.as_dict() == {"input_tokens": 30, "output_tokens": 12, "model_calls": 2, "tool_calls": 1}
    assert [(e.attempt, e.data["tool_call_id"]) for e in await _events(queue, run_id, "tool.call")] == [(1, "c1")]
    completed = await _events(queue, run_id, "message.completed")
    assert [(e.attempt, e.data["text"]) for e in completed] == [(2, "Recorded once.")]


async def test_approve_one_refund_and_deny_another_with_a_note(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(
        calls(
            ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-1"}),
            ToolCall("r2", "refund", {"path": str(refunds), "order_id": "o-2"}),
        ),
        answer("Refunded o-1 only."),
    )
    start_worker()
    run_id = await _enqueue(queue, "support", {"prompt": "refund both"})

    first = await _waiting(queue, run_id, 1)
    assert first["name"] == "approval"
    assert first["payload"] == {"tool_call_id": "r1", "name": "refund", "arguments": {"path": str(refunds), "order_id": "o-1"}}
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": True}, waitpoint_id=uuid.UUID(first["waitpoint_id"]))
    second = await _waiting(queue, run_id, 2)
    assert second["payload"]["tool_call_id"] == "r2"
    assert not refunds.exists()  # approved calls run once every decision is in
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": False, "note": "over the limit"})

    run = await _finished(queue, run_id, Status.DONE)
    assert run.output == {"text": "Refunded o-1 only."}
    assert refunds.read_text() == "refunded o-1\n"
    results = {e.data["tool_call_id"]: e.data for e in await _events(queue, run_id, "tool.result")}
    assert results["r2"] == {"tool_call_id": "r2", "name": "refund", "output": "denied: over the limit", "is_error": True}
    assert results["r1"]["output"] == "refunded o-1" and not results["r1"]["is_error"]
    assert len(server.requests) == 2  # the waits repeated no model request
    assert server.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "r2", "content": "denied: over the limit"}
    assert len(await _events(queue, run_id, "run.waiting")) == 2  # an answered approval is never asked again


async def test_a_provider_that_reuses_tool_call_ids_is_asked_again_for_each_approval(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    """Two model responses, each calling the approval tool under the same id: each call is its
    own decision (before, every key was -1:approval:<id> and the second refund ran unasked)."""
    refunds = tmp_path / "refunds.txt"
    server.script(
        calls(ToolCall("call_0", "refund", {"path": str(refunds), "order_id": "o-1"})),
        calls(ToolCall("call_0", "refund", {"path": str(refunds), "order_id": "o-2"})),
        answer("One refund."),
    )
    start_worker()
    run_id = await _enqueue(queue, "support", {"prompt": "refund twice"})

    first = await _waiting(queue, run_id, 1)
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": True}, waitpoint_id=uuid.UUID(first["waitpoint_id"]))
    second = await _waiting(queue, run_id, 2)
    assert second["payload"]["arguments"]["order_id"] == "o-2"
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": False, "note": "one is enough"})

    run = await _finished(queue, run_id, Status.DONE)
    assert run.output == {"text": "One refund."}
    assert refunds.read_text() == "refunded o-1\n"


async def test_a_thread_mixes_this_agent_and_the_openai_agent(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        answer("Hello, I can add."),
        calls(ToolCall("c1", "add", {"a": 2, "b": 3}), text="Adding."),
        answer("It is 5."),
        answer("You are welcome."),
    )
    start_worker()
    thread, _ = await queue.create_thread(tenant_id=TENANT, metadata={})
    run_ids = []
    for agent, prompt in (("openai", "hi"), ("support", "2+3?"), ("openai", "thanks")):
        new = NewRun(tenant_id=TENANT, agent=agent, input={"prompt": prompt})
        run, _, _ = await queue.enqueue_in_thread(thread.id, new, strategy=Strategy.ENQUEUE)
        run_ids.append(run.id)
    for run_id in run_ids:
        await _finished(queue, run_id, Status.DONE)

    stored = [m.message for m in await queue.thread_messages(thread.id, tenant_id=TENANT)]
    assert [(m["role"], m.get("content")) for m in stored] == [
        ("user", "hi"),
        ("assistant", "Hello, I can add."),
        ("user", "2+3?"),
        ("assistant", "Adding."),
        ("tool", "5"),
        ("assistant", "It is 5."),
        ("user", "thanks"),
        ("assistant", "You are welcome."),
    ]
    assert stored[3]["tool_calls"][0]["id"] == "c1" and stored[4]["tool_call_id"] == "c1"
    # the PydanticAI run read the openai run's messages; the last openai run reads them all
    assert server.requests[1].body["messages"][1:] == [*stored[:2], {"role": "user", "content": "2+3?"}]
    assert server.requests[3].body["messages"] == [*stored[:6], {"role": "user", "content": "thanks"}]


async def test_cancel_while_streaming_closes_the_model_stream(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(stall("Once upon a time, in a land far away"))
    start_worker()
    run_id = await _enqueue(queue, "support", {"prompt": "tell me a long story"})
    await eventually(lambda: _events(queue, run_id, "message.delta"), within_s=WITHIN_S)

    await queue.request_cancel(run_id, tenant_id=TENANT)

    await _finished(queue, run_id, Status.CANCELLED)
    await eventually(lambda: server.requests[0].disconnected)
    assert not await _events(queue, run_id, "message.completed")


async def test_an_agent_that_changed_between_attempts_ends_in_replay_mismatch(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(calls(ToolCall("f1", "flaky", {})))
    start_worker()
    run_id = await _enqueue(queue, "drifting", {"prompt": "go"})

    run = await _finished(queue, run_id, Status.DEAD)

    assert run.error_code == "replay_mismatch" and run.attempts == 2
    assert len(server.requests) == 1  # the changed request was never sent


async def test_structured_output_is_data(queue: Queue, server: FakeOpenAI, start_worker: StartWorker) -> None:
    server.script(calls(ToolCall("o1", "final_result", {"answer": "yes", "confidence": 0.75})))
    start_worker()
    run_id = await _enqueue(queue, "judge", {"messages": [{"role": "user", "content": "is it?"}]})

    run = await _finished(queue, run_id, Status.DONE)

    assert run.output == {"data": {"answer": "yes", "confidence": 0.75}}
    (completed,) = await _events(queue, run_id, "run.completed")
    assert completed.data["output"] == run.output
