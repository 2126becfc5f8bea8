"""The demo agent end to end through the worker runtime: every input field does what docs/contract.md (section 6) says."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.domain import Status, Strategy
from app.queue import NewRun, Queue
from tests.worker_support import (
    check_event_log,
    enqueue_demo,
    in_process_worker,
    wait_finished,
)


@pytest.fixture
async def worker(database_url: str, queue: Queue) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


def types(events: list) -> list[str]:
    return [e.type for e in events]


async def test_prompt_steps_and_output(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, prompt="hello there world", steps=2, step_s=0.01)
    done = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DONE
    assert done.output == {"text": "hello there world", "steps": 2}
    deltas = "".join(e.data["text"] for e in events if e.type == "message.delta")
    assert deltas == "hello there world"
    kinds = [t for t in types(events) if t != "message.delta"]
    assert kinds == [
        "run.queued",
        "run.started",
        "message.completed",
        "tool.call",
        "tool.result",
        "tool.call",
        "tool.result",
        "run.completed",
    ]
    calls = [e.data for e in events if e.type == "tool.call"]
    assert [c["tool_call_id"] for c in calls] == ["step_1", "step_2"]
    assert events[-1].data == {"output": {"text": "hello there world", "steps": 2}}


async def test_fail_attempts_retries_and_resumes_from_checkpoint(
    worker: None, queue: Queue
) -> None:
    run = await enqueue_demo(queue, prompt="hi", steps=2, step_s=0.01, fail_attempts=1)
    done = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DONE and done.attempts == 2
    retrying = [e for e in events if e.type == "run.retrying"]
    assert len(retrying) == 1 and retrying[0].data["error_code"] == "retryable_error"
    second = [e for e in events if e.attempt == 2]
    # Attempt 2 resumes after the last checkpointed step: no prompt, no step repeated.
    assert types(second) == ["run.started", "run.completed"]


async def test_fail_attempts_beyond_max_attempts_is_dead(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps=0, fail_attempts=5, max_attempts=2)
    done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.attempts == 2
    assert done.error_code == "retryable_error"
    check_event_log(await queue.read_events(run.id))


async def test_fatal_is_dead_at_once(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps=1, step_s=0.01, fatal=True)
    done = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DEAD and done.attempts == 1
    assert events[-1].type == "run.failed"
    assert events[-1].data == {"error_code": "fatal_error", "error_message": "demo fatal error"}


async def test_shell_output_and_exit_code(worker: None, queue: Queue) -> None:
    # The secret is assembled by the shell: only the output carries it.
    command = "echo out; echo err >&2; echo tok''en=abc123; exit 3"
    run = await enqueue_demo(queue, steps=0, shell=command)
    done = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DONE
    call = next(e for e in events if e.type == "tool.call")
    assert call.data == {
        "tool_call_id": "shell",
        "name": "shell",
        "arguments": {"command": command},
    }
    result = next(e for e in events if e.type == "tool.result").data
    assert result["name"] == "shell" and result["exit_code"] == 3 and result["is_error"] is True
    assert result["output"] == "out\nerr\ntoken=[REDACTED]\n"


async def test_effect_is_replayed_on_the_next_attempt(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps=0, effect="charge-card", fail_attempts=1)
    done = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DONE and done.attempts == 2
    results = [e for e in events if e.type == "tool.result"]
    assert [(r.attempt, r.data["replayed"]) for r in results] == [(1, False), (2, True)]
    # The replay hands back the record the first attempt committed.
    assert results[1].data["output"] == {"key": "charge-card", "attempt": 1}


async def test_budget_max_tool_calls(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps=3, step_s=0.01, budget={"max_tool_calls": 2})
    done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.error_code == "budget_exceeded"
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert types(events).count("tool.call") == 2


async def test_budget_max_turns(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, prompt="hi", steps=0, budget={"max_turns": 0})
    done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.error_code == "budget_exceeded"


async def test_deadline_stops_the_run(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps=1, step_s=30, budget={"deadline_s": 0.5})
    done = await wait_finished(queue, run.id, within=10)
    assert done.status is Status.DEAD and done.error_code == "deadline_exceeded"
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert "tool.call" in types(events)


async def test_unknown_agent_is_dead(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, agent="no-such-agent")
    done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.error_code == "unknown_agent"
    check_event_log(await queue.read_events(run.id))


async def test_invalid_input_is_fatal(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, steps="many")
    done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.error_code == "invalid_input"


async def test_cancel_keeps_partial_events(worker: None, queue: Queue) -> None:
    run = await enqueue_demo(queue, prompt="stop me", steps=5, step_s=5)

    async def first_call() -> bool:
        return "tool.call" in types(await queue.read_events(run.id))

    from tests.worker_support import wait_until

    await wait_until(first_call, within=10, what="the first tool call")
    await queue.request_cancel(run.id, tenant_id=None, note="enough")
    done = await wait_finished(queue, run.id, within=5)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.CANCELLED
    assert events[-1].type == "run.cancelled" and events[-1].data == {"reason": "user"}
    assert "message.completed" in types(events)


async def test_in_a_thread_a_retried_attempt_adds_no_message_twice(worker: None, queue: Queue) -> None:
    thread, _ = await queue.create_thread(tenant_id="t1", metadata={})
    input = {"prompt": "once", "steps": 2, "step_s": 0.01, "fail_attempts": 1}
    run, _, _ = await queue.enqueue_in_thread(
        thread.id, NewRun(tenant_id="t1", agent="demo", input=input), strategy=Strategy.ENQUEUE
    )
    done = await wait_finished(queue, run.id)
    assert (done.status, done.attempts) == (Status.DONE, 2)
    # attempt 1 stored the user's message with its first checkpoint, then failed after its
    # steps; attempt 2 resumed after the last step and added only the answer
    assert done.output == {"text": "once", "steps": 2, "thread_messages": 0}
    messages = await queue.thread_messages(thread.id, tenant_id="t1")
    assert [(m.index, m.message) for m in messages] == [
        (0, {"role": "user", "content": "once"}),
        (1, {"role": "assistant", "content": "once"}),
    ]
    starts = [e for e in await queue.read_events(run.id) if e.type == "run.started"]
    assert len(starts) == 2
