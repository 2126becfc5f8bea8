"""The PydanticAI adapter against the fake OpenAI server (real HTTP) and an in-memory run
context: events, replay from the ledger, approvals, mismatches, threads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from app.agents.base import BudgetExceeded, ThreadView, WaitRequested
from app.agents.pydantic_ai import ReplayMismatch
from app.agents.pydantic_ai.chat import request_messages, response_message, to_model_messages
from app.settings import Settings
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls
from tests.fakes.pydantic_agents import Drifting, Judge, Support
from tests.fakes.run_context import FakeRunContext


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeOpenAI) -> FakeOpenAI:
    shared_server.reset()
    return shared_server


@pytest.fixture
def settings(server: FakeOpenAI) -> Settings:
    return Settings(openai_base_url=server.base_url, openai_api_key="sk-test", openai_model="gpt-fake")


def _types(ctx: FakeRunContext) -> list[str]:
    return [t for t, _ in ctx.events if t != "message.delta"]


async def test_a_tool_using_agent_streams_its_steps_and_counts_them(server: FakeOpenAI, settings: Settings) -> None:
    server.script(
        calls(ToolCall("c1", "add", {"a": 1, "b": 2}), text="Adding.", usage=(10, 5)),
        answer("It is 3.", usage=(20, 7)),
    )
    ctx = FakeRunContext({"prompt": "what is 1+2"})

    output = await Support(settings).run(ctx)

    assert output == {"text": "It is 3."}
    assert _types(ctx) == ["message.completed", "tool.call", "tool.result", "message.completed"]
    assert "".join(d["text"] for d in ctx.of_type("message.delta")) == "Adding.It is 3."
    assert ctx.of_type("tool.call") == [{"tool_call_id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}]
    assert ctx.of_type("tool.result") == [{"tool_call_id": "c1", "name": "add", "output": 3, "is_error": False}]
    assert ctx.usage == {"input_tokens": 30, "output_tokens": 12, "model_calls": 2, "tool_calls": 0}
    assert (ctx.turns, ctx.tool_calls) == (2, 1)
    assert sorted(ctx.effects) == ["pydantic-ai:0:model", "pydantic-ai:0:tool:c1", "pydantic-ai:1:model"]
    assert server.requests[0].authorization == "Bearer sk-test"
    assert server.requests[0].body["model"] == "gpt-fake"


async def test_a_retried_attempt_replays_every_recorded_step_silently(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(ToolCall("c1", "record", {"path": str(notes), "note": "once"}), usage=(10, 5)),
        answer("Recorded.", usage=(20, 7)),
    )
    first = FakeRunContext({"prompt": "record it"})
    await Support(settings).run(first)

    retried = first.retry()
    output = await Support(settings).run(retried)

    assert output == {"text": "Recorded."}
    assert len(server.requests) == 2  # no model request again
    assert notes.read_text() == "once\n"  # nor the tool
    assert retried.events == [] and not any(retried.usage.values())
    assert (retried.turns, retried.tool_calls) == (0, 0)


async def test_a_crash_before_the_steps_commit_runs_the_step_again(server: FakeOpenAI, settings: Settings) -> None:
    """A step's record, events and usage go in one commit: a crash before it leaves none of
    them, and the retried attempt runs that step alone again."""
    server.script(calls(ToolCall("c1", "add", {"a": 2, "b": 2})), answer("Four."), answer("Four."))
    first = FakeRunContext({"prompt": "2+2"})
    await Support(settings).run(first)
    del first.effects["pydantic-ai:1:model"]

    retried = first.retry()
    assert await Support(settings).run(retried) == {"text": "Four."}

    assert len(server.requests) == 3  # the unrecorded last request only
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]
    assert _types(retried) == ["message.completed"] and retried.usage["model_calls"] == 1


async def test_approval_waits_then_runs_the_approved_call_once(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(calls(ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-7"})), answer("Refunded."))
    first = FakeRunContext({"prompt": "refund o-7"})

    with pytest.raises(WaitRequested) as waiting:
        await Support(settings).run(first)

    assert (waiting.value.name, waiting.value.payload) == (
        "approval",
        {"tool_call_id": "r1", "name": "refund", "arguments": {"path": str(refunds), "order_id": "o-7"}},
    )
    assert not refunds.exists()
    resumed = first.resume({"approved": True})
    assert await Support(settings).run(resumed) == {"text": "Refunded."}
    assert refunds.read_text() == "refunded o-7\n"
    assert _types(resumed) == ["tool.call", "tool.result", "message.completed"]
    again = resumed.retry()  # a later attempt neither asks nor refunds again
    assert await Support(settings).run(again) == {"text": "Refunded."}
    assert refunds.read_text() == "refunded o-7\n" and not again.asked


async def test_a_denial_and_its_note_reach_the_model(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(calls(ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-7"})), answer("Not refunded."))
    first = FakeRunContext({"prompt": "refund o-7"})
    with pytest.raises(WaitRequested):
        await Support(settings).run(first)

    resumed = first.resume({"approved": False, "note": "over the limit"})
    assert await Support(settings).run(resumed) == {"text": "Not refunded."}

    assert not refunds.exists()
    assert resumed.of_type("tool.result") == [
        {"tool_call_id": "r1", "name": "refund", "output": "denied: over the limit", "is_error": True}
    ]
    assert server.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "r1", "content": "denied: over the limit"}


async def test_a_changed_request_on_replay_is_a_replay_mismatch(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("f1", "flaky", {})))
    first = FakeRunContext({"prompt": "go"})
    with pytest.raises(RuntimeError, match="first attempt"):
        await Drifting(settings).run(first)

    with pytest.raises(ReplayMismatch) as mismatch:
        await Drifting(settings).run(first.retry())

    assert mismatch.value.code == "replay_mismatch"
    assert len(server.requests) == 1


async def test_structured_output_is_data(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("o1", "final_result", {"answer": "yes", "confidence": 0.9})))
    ctx = FakeRunContext({"prompt": "is it?"}, thread=ThreadView(uuid.uuid4(), []))

    assert await Judge(settings).run(ctx) == {"data": {"answer": "yes", "confidence": 0.9}}
    assert ctx.messages == [
        {"role": "user", "content": "is it?"},
        {"role": "assistant", "content": '{"answer": "yes", "confidence": 0.9}'},
    ]


async def test_max_turns_is_counted_per_model_request(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("c1", "add", {"a": 1, "b": 1})), answer("never"))
    ctx = FakeRunContext({"prompt": "loop"}, budget={"max_turns": 1})

    with pytest.raises(BudgetExceeded):
        await Support(settings).run(ctx)
    assert len(server.requests) == 1


async def test_a_thread_gets_the_runs_messages_in_chat_format(server: FakeOpenAI, settings: Settings) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "h1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "h1", "content": "ok"},
        {"role": "assistant", "content": "Hello."},
    ]
    server.script(calls(ToolCall("c1", "add", {"a": 1, "b": 2}), text="Adding."), answer("3."))
    ctx = FakeRunContext({"prompt": "1+2?"}, thread=ThreadView(uuid.uuid4(), history))

    await Support(settings).run(ctx)

    sent = server.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[2]["tool_calls"][0]["id"] == "h1" and sent[-1] == {"role": "user", "content": "1+2?"}
    assert ctx.messages == [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "Adding.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": "3."},
    ]  # fmt: skip


def test_chat_messages_round_trip() -> None:
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t", "content": "done"},
    ]
    messages = to_model_messages(chat)

    assert [type(m) for m in messages] == [ModelRequest, ModelResponse, ModelRequest]
    assert isinstance(messages[0].parts[1], UserPromptPart) and messages[0].parts[1].content == "ab"
    assert messages[1].parts == [TextPart("x"), ToolCallPart("f", "{}", tool_call_id="t")]
    returned = messages[2].parts[0]
    assert isinstance(returned, ToolReturnPart) and returned.tool_name == "f"
    assert response_message(messages[1]) == chat[2]  # type: ignore[arg-type]
    assert request_messages(messages[2].parts) == [chat[3]]  # type: ignore[union-attr]
