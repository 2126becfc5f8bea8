"""LangGraph graphs run by a worker (on the test's event loop), real PostgreSQL, and
langchain-openai's ChatOpenAI talking to the fake model server on 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Event, Run, Status, Strategy
from app.queue import NewRun, Queue
from app.settings import get_settings
from tests.fakes.langgraph_agents import BREAKS
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls, stall
from tests.worker_support import check_event_log, in_process_worker, wait_finished, wait_until

TENANT = "t1"
AGENTS = {
    name: f"tests.fakes.langgraph_agents:{cls}"
    for name, cls in {
        "lg_tools": "ToolGraph",
        "lg_refund": "RefundGraph",
        "lg_approval": "ApprovalGraph",
        "lg_questions": "TwoQuestionsGraph",
        "lg_counter": "CounterGraph",
        "lg_breaking": "BreakingGraph",
        "lg_count_ask": "CountThenAskGraph",
    }.items()
}


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def worker(
    database_url: str, fake_model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[FakeOpenAI]:
    fake_model.reset()
    monkeypatch.setenv("RUNQ_OPENAI_BASE_URL", fake_model.base_url)
    monkeypatch.setenv("RUNQ_OPENAI_API_KEY", "sk-test-0123456789abcdefghij")
    get_settings.cache_clear()
    async with in_process_worker(database_url, agents=AGENTS):
        yield fake_model
    get_settings.cache_clear()


async def _run(queue: Queue, agent: str, input: dict[str, Any], **fields: Any) -> uuid.UUID:
    run, _ = await queue.enqueue(NewRun(tenant_id=TENANT, agent=agent, input=input, **fields))
    return run.id


async def _status(queue: Queue, run_id: uuid.UUID, status: Status) -> Run:
    async def probe() -> Run | None:
        run = await queue.get_run(run_id, tenant_id=None)
        if run.is_terminal and run.status is not status:
            raise AssertionError(f"run ended {run.status}: {run.error_code} {run.error_message}")
        return run if run.status is status else None

    return await wait_until(probe, within=30, what=f"run {status}")


def _types(events: list[Event]) -> list[str]:
    return [e.type for e in events if e.type != "message.delta"]


async def test_a_model_and_tool_graph_streams_its_events(queue: Queue, worker: FakeOpenAI) -> None:
    worker.script(
        calls(ToolCall("call_1", "add", {"a": 2, "b": 3}), text="Adding.", usage=(10, 4)),
        answer("It is 5.", usage=(20, 6)),
    )
    run_id = await _run(queue, "lg_tools", {"prompt": "what is 2 + 3?"})

    run = await _status(queue, run_id, Status.DONE)

    events = await queue.read_events(run_id)
    check_event_log(events)
    assert _types(events) == [
        "run.queued",
        "run.started",
        "message.completed",
        "tool.call",
        "graph.node",
        "tool.result",
        "graph.node",
        "message.completed",
        "graph.node",
        "run.completed",
    ]
    data = [e.data for e in events if e.type not in ("message.delta", "run.queued", "run.started")]
    assert data[:7] == [
        {"text": "Adding."},
        {"tool_call_id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}},
        {"node": "model", "step": 1},
        {"tool_call_id": "call_1", "name": "add", "output": "5", "is_error": False},
        {"node": "tools", "step": 2},
        {"text": "It is 5."},
        {"node": "model", "step": 3},
    ]
    assert "".join(e.data["text"] for e in events if e.type == "message.delta") == "Adding.It is 5."
    assert run.output["text"] == "It is 5."
    assert [m["role"] for m in run.output["state"]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert run.usage.as_dict() == {
        "input_tokens": 30,
        "output_tokens": 10,
        "model_calls": 2,
        "tool_calls": 1,
    }
    assert len(worker.requests) == 2


async def test_max_turns_ends_the_run_dead(queue: Queue, worker: FakeOpenAI) -> None:
    worker.script(calls(ToolCall("call_1", "add", {"a": 1, "b": 1})), answer("2"))
    run_id = await _run(queue, "lg_tools", {"prompt": "1 + 1?"}, budget={"max_turns": 1})

    run = await _status(queue, run_id, Status.DEAD)

    assert run.error_code == "budget_exceeded"
    assert len(worker.requests) == 1


async def test_max_turns_holds_across_a_retried_attempt(queue: Queue, worker: FakeOpenAI) -> None:
    """The turns an attempt used are stored with its steps: the retried attempt goes on from
    them (before, it counted from zero and the run spent its budget again on every attempt)."""
    BREAKS["left"] = 1
    worker.script(
        calls(ToolCall("call_1", "add", {"a": 1, "b": 1})),
        calls(ToolCall("call_2", "add", {"a": 2, "b": 2})),
        answer("never"),
    )
    run_id = await _run(queue, "lg_breaking", {"prompt": "add twice"}, budget={"max_turns": 2})

    run = await _status(queue, run_id, Status.DEAD)

    assert (run.error_code, run.attempts) == ("budget_exceeded", 2), run.error_message
    assert len(worker.requests) == 2  # the third turn was refused before its request
    assert run.usage.model_calls == 2


async def test_cancel_closes_the_model_stream(queue: Queue, worker: FakeOpenAI) -> None:
    worker.script(stall("Once upon a time"))
    run_id = await _run(queue, "lg_tools", {"prompt": "tell me a story"})

    async def streaming() -> bool:
        return any(e.type == "message.delta" for e in await queue.read_events(run_id))

    await wait_until(streaming, within=30, what="the model to stream")
    await queue.request_cancel(run_id, tenant_id=TENANT)
    run = await _status(queue, run_id, Status.CANCELLED)

    await wait_until(lambda: worker.requests[0].disconnected, within=10, what="the stream to close")
    assert run.cancel_reason == "user"
    check_event_log(await queue.read_events(run_id))


async def test_an_interrupt_waits_and_the_resume_value_reaches_the_node(
    queue: Queue, worker: FakeOpenAI
) -> None:
    run_id = await _run(queue, "lg_approval", {"prompt": "deploy"}, max_attempts=1)

    waiting = await _status(queue, run_id, Status.WAITING)
    [event] = [e for e in await queue.read_events(run_id) if e.type == "run.waiting"]
    assert event.data["name"] == "interrupt"
    [open_interrupt] = event.data["payload"]["interrupts"]
    assert open_interrupt["value"] == {"question": "ship it?"} and open_interrupt["id"]
    assert waiting.waitpoint is not None

    await queue.resume(run_id, tenant_id=TENANT, value="yes, ship")
    run = await _status(queue, run_id, Status.DONE)

    assert run.output["text"] == "decision: yes, ship"
    events = await queue.read_events(run_id)
    check_event_log(events)
    assert [e.data for e in events if e.type == "graph.node"] == [{"node": "approve", "step": 1}]


async def test_an_interrupted_tool_counts_once_and_a_call_only_message_completes_nothing(
    queue: Queue, worker: FakeOpenAI
) -> None:
    worker.script(
        calls(ToolCall("call_r", "refund", {"order_id": "42"}), usage=(12, 3)),
        answer("Refunded order 42.", usage=(30, 4)),
    )
    run_id = await _run(queue, "lg_refund", {"prompt": "Refund order 42"}, max_attempts=1)
    await _status(queue, run_id, Status.WAITING)
    await queue.resume(run_id, tenant_id=TENANT, value={"approved": True})
    run = await _status(queue, run_id, Status.DONE)

    assert run.usage.as_dict() == {"input_tokens": 42, "output_tokens": 7, "model_calls": 2, "tool_calls": 1}
    events = await queue.read_events(run_id)
    assert [e.data for e in events if e.type == "message.completed"] == [{"text": "Refunded order 42."}]
    assert [e.data["output"] for e in events if e.type == "tool.result"] == ["refunded 42"]


async def test_two_interrupts_in_a_row_are_two_waits(queue: Queue, worker: FakeOpenAI) -> None:
    run_id = await _run(queue, "lg_questions", {"prompt": "ask me"}, max_attempts=1)

    await _status(queue, run_id, Status.WAITING)
    await queue.resume(run_id, tenant_id=TENANT, value="A")

    async def second_wait() -> list[Event]:
        waits = [e for e in await queue.read_events(run_id) if e.type == "run.waiting"]
        return waits if len(waits) == 2 else []

    waits = await wait_until(second_wait, within=30, what="the second wait")
    assert waits[1].data["payload"]["interrupts"][0]["value"] == "second?"
    await queue.resume(run_id, tenant_id=TENANT, value="B")
    run = await _status(queue, run_id, Status.DONE)

    assert run.output["text"] == "A then B"


async def test_two_runs_of_one_thread_share_the_graph_state(
    queue: Queue, worker: FakeOpenAI, engine: AsyncEngine
) -> None:
    thread, _ = await queue.create_thread(tenant_id=TENANT, metadata={})
    outputs = []
    for prompt in ("hello", "again"):
        run, _, _ = await queue.enqueue_in_thread(
            thread.id, NewRun(tenant_id=TENANT, agent="lg_counter", input={"prompt": prompt})
        )
        outputs.append((await wait_finished(queue, run.id, within=30)).output)

    assert [o["text"] for o in outputs] == ["I have seen 1 messages", "I have seen 3 messages"]
    history = await queue.thread_messages(thread.id, tenant_id=TENANT)
    assert [(m.message["role"], m.message["content"]) for m in history] == [
        ("user", "hello"),
        ("assistant", "I have seen 1 messages"),
        ("user", "again"),
        ("assistant", "I have seen 3 messages"),
    ]
    async with engine.connect() as conn:
        threads = (
            (await conn.execute(text("SELECT DISTINCT thread_id FROM langgraph_checkpoints")))
            .scalars()
            .all()
        )
    assert threads == [str(thread.id)]  # the LangGraph thread is the runq thread

    await queue.delete_thread(thread.id, tenant_id=TENANT)  # and goes with it
    async with engine.connect() as conn:
        left = (await conn.execute(text("SELECT count(*) FROM langgraph_checkpoints"))).scalar_one()
    assert left == 0


async def test_a_regenerated_answer_starts_from_the_graph_memory_before_the_one_it_replaces(
    queue: Queue, worker: FakeOpenAI
) -> None:
    """The thread's history and the graph's memory agree: the replaced run's messages go from
    both (before, the history showed [Q, A2] while the graph had seen [Q, A1, Q])."""
    thread, _ = await queue.create_thread(tenant_id=TENANT, metadata={})
    run, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id=TENANT, agent="lg_counter", input={"prompt": "Q"}))
    assert (await wait_finished(queue, run.id, within=30)).output["text"] == "I have seen 1 messages"

    again = await queue.regenerate_in_thread(thread.id, NewRun(tenant_id=TENANT, agent="lg_counter", input={"prompt": "Q"}))

    assert (await wait_finished(queue, again.id, within=30)).output["text"] == "I have seen 1 messages"
    history = await queue.thread_messages(thread.id, tenant_id=TENANT)
    assert [(m.message["role"], m.message["content"], m.run_id) for m in history] == [
        ("user", "Q", again.id),
        ("assistant", "I have seen 1 messages", again.id),
    ]


async def test_a_rolled_back_run_leaves_nothing_in_the_graph_memory(queue: Queue, worker: FakeOpenAI) -> None:
    thread, _ = await queue.create_thread(tenant_id=TENANT, metadata={})
    first, _, _ = await queue.enqueue_in_thread(
        thread.id, NewRun(tenant_id=TENANT, agent="lg_count_ask", input={"prompt": "hi"})
    )
    waiting = await _status(queue, first.id, Status.WAITING)
    assert waiting.waitpoint is not None and waiting.waitpoint["payload"]["interrupts"][0]["value"] == {"seen": 1}

    second, _, cancelled = await queue.enqueue_in_thread(
        thread.id, NewRun(tenant_id=TENANT, agent="lg_count_ask", input={"prompt": "hey"}), strategy=Strategy.ROLLBACK
    )

    assert [r.id for r in cancelled] == [first.id]
    asking = await _status(queue, second.id, Status.WAITING)
    assert asking.waitpoint is not None and asking.waitpoint["payload"]["interrupts"][0]["value"] == {"seen": 1}
