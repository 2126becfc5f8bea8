"""The ``openai`` agent end to end: real worker processes, real PostgreSQL, the fake model server."""

from __future__ import annotations

import json
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
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls, error, stall

ROOT = Path(__file__).resolve().parents[2]
TENANT = "t1"
API_KEY = "sk-test-0123456789abcdefghij"

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
    """Start ``python -m app.worker`` processes with short timings; all are stopped at the end."""
    env = os.environ | {
        "RUNQ_DATABASE_URL": database_url,
        "RUNQ_OPENAI_BASE_URL": server.base_url,
        "RUNQ_OPENAI_API_KEY": API_KEY,
        "RUNQ_AGENTS": "recording=tests.fakes.openai_agents:RecordingAgent",
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
                [sys.executable, "-m", "app.worker", "--concurrency", "2"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
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


async def _enqueue(queue: Queue, agent: str, input: dict[str, Any]) -> uuid.UUID:
    run, _ = await queue.enqueue(NewRun(tenant_id=TENANT, agent=agent, input=input, max_attempts=3))
    return run.id


async def _finished(queue: Queue, run_id: uuid.UUID, status: Status) -> Run:
    async def probe() -> Run | None:
        run = await queue.get_run(run_id, tenant_id=TENANT)
        if run.is_terminal and run.status is not status:
            raise AssertionError(f"run ended {run.status}: {run.error_code} {run.error_message}")
        return run if run.status is status else None

    return await eventually(probe, within_s=30)


async def _events(queue: Queue, run_id: uuid.UUID, type: str | None = None) -> list[Event]:
    return [e for e in await queue.read_events(run_id) if type is None or e.type == type]


async def test_two_tool_conversation(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(
            ToolCall("call_ls", "shell", {"command": "echo two tools"}),
            ToolCall("call_rec", "record", {"path": str(notes), "note": "remember me"}),
            text="Working on it.",
        ),
        answer("Done: two tools, one note."),
    )
    start_worker()
    run_id = await _enqueue(
        queue, "recording", {"prompt": "use both tools", "tools": ["shell", "record"]}
    )

    run = await _finished(queue, run_id, Status.DONE)

    assert run.output == {"text": "Done: two tools, one note."}
    events = await _events(queue, run_id)
    assert [e.type for e in events if e.type != "message.delta"] == [
        "run.queued",
        "run.started",
        "message.completed",
        "tool.call",
        "tool.result",
        "tool.call",
        "tool.result",
        "message.completed",
        "run.completed",
    ]
    text = "".join(e.data["text"] for e in events if e.type == "message.delta")
    assert text == "Working on it.Done: two tools, one note."
    results = [e.data for e in events if e.type == "tool.result"]
    assert results == [
        {
            "tool_call_id": "call_ls",
            "output": {"exit_code": 0, "output": "two tools\n"},
            "is_error": False,
        },
        {"tool_call_id": "call_rec", "output": {"recorded": "remember me"}, "is_error": False},
    ]
    assert notes.read_text() == "remember me\n"
    assert [r.authorization for r in server.requests] == [f"Bearer {API_KEY}"] * 2
    assert [m["role"] for m in server.requests[1].body["messages"]] == [
        "user",
        "assistant",
        "tool",
        "tool",
    ]


async def test_cancel_closes_the_model_stream(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(stall("Once upon a time, in a land far away"))
    start_worker()
    run_id = await _enqueue(queue, "openai", {"prompt": "tell me a long story"})
    await eventually(lambda: _events(queue, run_id, "message.delta"))

    await queue.request_cancel(run_id, tenant_id=TENANT)

    await _finished(queue, run_id, Status.CANCELLED)
    await eventually(lambda: server.requests[0].disconnected)
    assert not await _events(queue, run_id, "message.completed")


async def test_cancel_kills_a_running_shell_tool(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    server.script(
        calls(ToolCall("c1", "shell", {"command": f"echo $$ > {pid_file}; exec sleep 60"}))
    )
    start_worker()
    run_id = await _enqueue(queue, "openai", {"prompt": "wait a minute", "tools": ["shell"]})
    pid = int(await eventually(lambda: pid_file.exists() and pid_file.read_text().strip()))

    await queue.request_cancel(run_id, tenant_id=TENANT)

    await _finished(queue, run_id, Status.CANCELLED)
    await eventually(lambda: not _alive(pid))


@pytest.mark.chaos
async def test_sigkill_after_a_tool_result_resumes_from_the_checkpoint(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(
            ToolCall("call_a", "record", {"path": str(notes), "note": "first"}),
            ToolCall(
                "call_b", "record", {"path": str(notes), "note": "second", "hang_on_attempt": 1}
            ),
        ),
        answer("both recorded"),
    )
    doomed = start_worker()
    run_id = await _enqueue(queue, "recording", {"prompt": "record twice", "tools": ["record"]})
    # call_a's result is checkpointed before call_b starts; call_b then hangs on attempt 1.
    await eventually(lambda: notes.with_suffix(".hanging").exists())

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    start_worker()  # reclaims the run once the dead worker's lease has expired

    run = await _finished(queue, run_id, Status.DONE)

    assert run.output == {"text": "both recorded"} and run.attempts == 2
    assert notes.read_text() == "first\nsecond\n"  # each side effect exactly once
    assert len(server.requests) == 2  # turn 1 was not asked again
    assert server.requests[0].body["messages"] == [{"role": "user", "content": "record twice"}]
    resumed = server.requests[1].body["messages"]
    assert [m.get("tool_call_id") for m in resumed[2:]] == ["call_a", "call_b"]
    results = await _events(queue, run_id, "tool.result")
    assert [(e.attempt, e.data["tool_call_id"]) for e in results] == [(1, "call_a"), (2, "call_b")]


async def test_rate_limited_then_answers(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(error(429, "Rate limit reached for requests", retry_after="0"), answer("hello"))
    start_worker()
    run_id = await _enqueue(
        queue, "openai", {"prompt": "hi", "model": "gpt-test", "temperature": 0}
    )

    run = await _finished(queue, run_id, Status.DONE)

    assert run.output == {"text": "hello"} and run.attempts == 1
    assert len(server.requests) == 2
    assert server.requests[1].body["model"] == "gpt-test"


async def test_bad_request_kills_the_run_with_the_providers_message(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        error(
            400, "Invalid value for 'temperature': must be <= 2, key sk-proj-abcdefghijklmnop0123"
        )
    )
    start_worker()
    run_id = await _enqueue(queue, "openai", {"prompt": "hi", "temperature": 7})

    run = await _finished(queue, run_id, Status.DEAD)

    assert run.error_code == "model_error" and run.attempts == 1
    assert run.error_message is not None
    assert "HTTP 400: Invalid value for 'temperature': must be <= 2" in run.error_message
    assert "abcdefghijklmnop0123" not in run.error_message
    (failed,) = await _events(queue, run_id, "run.failed")
    assert failed.data["error_code"] == "model_error"
    assert len(server.requests) == 1


# -- approval of tools (docs/waits.md) --------------------------------------------------------


async def _approval(queue: Queue, run_id: uuid.UUID, occurrence: int) -> dict[str, Any]:
    """The payload of the run's open approval once it waits for its ``occurrence``-th."""

    async def probe() -> dict[str, Any] | None:
        run = await queue.get_run(run_id, tenant_id=TENANT)
        if run.is_terminal:
            raise AssertionError(f"run ended {run.status}: {run.error_code} {run.error_message}")
        waits = await _events(queue, run_id, "run.waiting")
        return run.waitpoint if run.status is Status.WAITING and len(waits) == occurrence else None

    point: dict[str, Any] = await eventually(probe, within_s=30)
    return point


async def test_approved_tool_runs_once_and_denied_tool_never(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(
            ToolCall("call_ok", "record", {"path": str(notes), "note": "approved"}),
            ToolCall("call_no", "record", {"path": str(notes), "note": "denied"}),
        ),
        answer("one of two"),
    )
    start_worker()
    run_id = await _enqueue(
        queue, "recording", {"prompt": "record both", "tools": ["record"], "approve_tools": ["record"]}
    )

    first = await _approval(queue, run_id, 1)
    assert first["name"] == "approval"
    assert first["payload"] == {"tool_call_id": "call_ok", "name": "record", "arguments": {"path": str(notes), "note": "approved"}}
    assert not notes.exists()
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": True}, waitpoint_id=uuid.UUID(first["waitpoint_id"]))
    second = await _approval(queue, run_id, 2)
    assert second["payload"]["tool_call_id"] == "call_no"
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": False, "note": "not that one"})

    run = await _finished(queue, run_id, Status.DONE)
    assert run.output == {"text": "one of two"}
    assert notes.read_text() == "approved\n"
    results = [e.data for e in await _events(queue, run_id, "tool.result")]
    assert results == [
        {"tool_call_id": "call_ok", "output": {"recorded": "approved"}, "is_error": False},
        {"tool_call_id": "call_no", "output": "denied: not that one", "is_error": True},
    ]
    assert len(server.requests) == 2  # the waits repeated no model turn
    assert server.requests[1].body["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_no", "content": json.dumps({"error": "denied: not that one"}),
    }  # fmt: skip
    events = await _events(queue, run_id)
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2, 3]


@pytest.mark.chaos
async def test_sigkill_after_approval_neither_asks_again_nor_runs_the_tool_twice(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(ToolCall("call_a", "record", {"path": str(notes), "note": "once", "hang_on_attempt": 2})),
        answer("recorded"),
    )
    doomed = start_worker()
    run_id = await _enqueue(queue, "recording", {"prompt": "record", "tools": ["record"], "approve_tools": "*"})
    await _approval(queue, run_id, 1)
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": True})
    await eventually(lambda: notes.with_suffix(".hanging").exists())  # approved, the tool is running

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    start_worker()

    run = await _finished(queue, run_id, Status.DONE)
    assert run.output == {"text": "recorded"} and run.attempts == 3
    assert notes.read_text() == "once\n"
    assert len(await _events(queue, run_id, "run.waiting")) == 1  # the recorded approval held


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_thread_sends_the_history_and_stores_every_message_of_its_turns(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        calls(ToolCall("call_1", "shell", {"command": "echo hi"}), text="Looking."),
        answer("It said hi."),
        answer("You are welcome."),
    )
    start_worker()
    thread, _ = await queue.create_thread(tenant_id=TENANT, metadata={})
    run_ids = []
    for prompt in ("run echo", "thanks"):
        new = NewRun(tenant_id=TENANT, agent="openai", input={"prompt": prompt, "tools": ["shell"], "system": "Be brief."})
        run, _, _ = await queue.enqueue_in_thread(thread.id, new, strategy=Strategy.ENQUEUE)
        run_ids.append(run.id)
    for run_id in run_ids:
        await _finished(queue, run_id, Status.DONE)

    stored = [m.message for m in await queue.thread_messages(thread.id, tenant_id=TENANT)]
    assert [(m["role"], m.get("content")) for m in stored] == [
        ("user", "run echo"),
        ("assistant", "Looking."),
        ("tool", '{"exit_code": 0, "output": "hi\\n"}'),
        ("assistant", "It said hi."),
        ("user", "thanks"),
        ("assistant", "You are welcome."),
    ]
    assert stored[1]["tool_calls"][0]["id"] == "call_1" and stored[2]["tool_call_id"] == "call_1"
    # the second run's request: its system prompt, the whole history, then the new input
    sent = server.requests[2].body["messages"]
    assert sent == [{"role": "system", "content": "Be brief."}, *stored[:4], {"role": "user", "content": "thanks"}]
# -- usage and budgets (docs/usage.md) --------------------------------------------------------


async def test_usage_is_the_sum_of_the_usage_chunks_sent(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        calls(ToolCall("c1", "shell", {"command": "echo hi"}), usage=(120, 30)),
        calls(ToolCall("c2", "shell", {"command": "echo again"}), usage=(180, 25)),
        answer("no usage from this one"),  # a model call, no tokens
    )
    start_worker()
    run_id = await _enqueue(queue, "openai", {"prompt": "count me", "tools": ["shell"]})

    run = await _finished(queue, run_id, Status.DONE)

    assert all(r.body["stream_options"] == {"include_usage": True} for r in server.requests)
    assert run.usage.as_dict() == {
        "input_tokens": 300,
        "output_tokens": 55,
        "model_calls": 3,
        "tool_calls": 2,
    }


async def test_max_tokens_stops_the_run_mid_conversation(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker
) -> None:
    server.script(
        calls(ToolCall("c1", "shell", {"command": "echo one"}), usage=(60, 20)),
        calls(ToolCall("c2", "shell", {"command": "echo two"}), usage=(90, 20)),
        answer("never asked for"),
    )
    start_worker()
    run, _ = await queue.enqueue(NewRun(
        tenant_id=TENANT,
        agent="openai",
        input={"prompt": "spend", "tools": ["shell"]},
        budget={"max_tokens": 150},
        max_attempts=3),
    )

    dead = await _finished(queue, run.id, Status.DEAD)

    assert dead.error_code == "budget_exceeded" and dead.attempts == 1
    assert dead.error_message == "max_tokens of 150 passed (190 tokens used)"
    assert dead.usage.as_dict() == {
        "input_tokens": 150,
        "output_tokens": 40,
        "model_calls": 2,
        "tool_calls": 1,
    }
    assert len(server.requests) == 2
    # the second turn's tool call never ran: the run stopped on its usage chunk
    assert [e.data["tool_call_id"] for e in await _events(queue, run.id, "tool.call")] == ["c1"]
    (failed,) = await _events(queue, run.id, "run.failed")
    assert failed.data["error_code"] == "budget_exceeded"


@pytest.mark.chaos
async def test_usage_survives_a_retry_from_the_checkpoint_without_double_counting(
    queue: Queue, server: FakeOpenAI, start_worker: StartWorker, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(
            ToolCall("call_a", "record", {"path": str(notes), "note": "first"}),
            ToolCall(
                "call_b", "record", {"path": str(notes), "note": "second", "hang_on_attempt": 1}
            ),
            usage=(100, 10),
        ),
        answer("both recorded", usage=(50, 5)),
    )
    doomed = start_worker()
    run_id = await _enqueue(queue, "recording", {"prompt": "record twice", "tools": ["record"]})
    # turn 1 and call_a are checkpointed; call_b is counted, not stored, when the worker dies
    await eventually(lambda: notes.with_suffix(".hanging").exists())
    stored = await queue.get_run(run_id, tenant_id=TENANT)
    assert stored.usage.as_dict() == {
        "input_tokens": 100,
        "output_tokens": 10,
        "model_calls": 1,
        "tool_calls": 1,
    }

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    start_worker()

    run = await _finished(queue, run_id, Status.DONE)

    assert run.attempts == 2
    # call_b once (attempt 2 redid it), turn 1 once (not asked again), turn 2 once
    assert run.usage.as_dict() == {
        "input_tokens": 150,
        "output_tokens": 15,
        "model_calls": 2,
        "tool_calls": 2,
    }
    assert (await queue.stats()).usage_last_24h == {TENANT: run.usage}  # the tenant's hour too
