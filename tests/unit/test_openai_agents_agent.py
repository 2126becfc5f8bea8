"""The OpenAI Agents SDK adapter against the fake OpenAI server (real HTTP) and an in-memory run
context: events, replay from the ledger and from the checkpoint, parallel tools, approvals,
handoffs to an agent with a model of its own, mismatches, budgets, threads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel
from openai import AsyncOpenAI

from app.agents.base import BudgetExceeded, ThreadView, WaitRequested
from app.agents.openai_agents import OpenAIAgentsAgent, ReplayMismatch
from app.agents.openai_agents.session import to_chat, to_items
from app.settings import Settings
from tests.fakes.agents_sdk_agents import Drifting, Judge, Support, add, refund
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls
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


def _handing_off(server: FakeOpenAI) -> type[OpenAIAgentsAgent]:
    """``front`` hands off to ``billing``, whose model is an instance of its own (the SDK
    prefers it over any provider) on another model name."""
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-own")
    billing = Agent(name="billing", model=OpenAIChatCompletionsModel("own-model", openai_client=client), tools=[refund, add])
    front = Agent(name="front", instructions="Route the customer.", handoffs=[billing])

    class Front(OpenAIAgentsAgent):
        agent = front

    return Front


async def test_a_tool_using_agent_streams_its_steps_and_counts_them(server: FakeOpenAI, settings: Settings) -> None:
    server.script(
        calls(ToolCall("c1", "add", {"a": 1, "b": 2}), text="Adding.", usage=(10, 5)),
        answer("It is 3.", usage=(20, 7)),
    )
    ctx = FakeRunContext({"prompt": "what is 1+2"})

    output = await Support(settings).run(ctx)

    assert output == {"text": "It is 3.", "agent": "support"}
    assert _types(ctx) == ["message.completed", "tool.call", "tool.result", "message.completed"]
    assert "".join(d["text"] for d in ctx.of_type("message.delta")) == "Adding.It is 3."
    assert ctx.of_type("tool.call") == [{"tool_call_id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}]
    assert ctx.of_type("tool.result") == [{"tool_call_id": "c1", "name": "add", "output": 3, "is_error": False}]
    assert ctx.usage == {"input_tokens": 30, "output_tokens": 12, "model_calls": 2, "tool_calls": 0}
    assert ctx.tool_calls == 1
    assert sorted(ctx.effects) == ["openai-agents:0:model", "openai-agents:0:tool:c1", "openai-agents:1:model"]
    first = server.requests[0]
    assert first.authorization == "Bearer sk-test" and first.body["model"] == "gpt-fake"
    assert first.body["stream_options"] == {"include_usage": True}  # asked of RUNQ_OPENAI_BASE_URL too


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

    assert output == {"text": "Recorded.", "agent": "support"}
    assert notes.read_text() == "once\n" and len(server.requests) == 2
    assert retried.events == [] and retried.tool_calls == 0
    assert retried.usage == {"input_tokens": 0, "output_tokens": 0, "model_calls": 0, "tool_calls": 0}


async def test_a_crash_mid_run_replays_the_steps_before_it_and_goes_on_live(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("c1", "add", {"a": 1, "b": 2}), usage=(10, 5)), answer("3", usage=(20, 7)))
    first = FakeRunContext({"prompt": "add"})
    await Support(settings).run(first)
    del first.effects["openai-agents:1:model"]  # the last response was never recorded
    server.script(answer("three", usage=(20, 7)))

    retried = first.retry()
    output = await Support(settings).run(retried)

    assert output["text"] == "three" and len(server.requests) == 3
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]
    assert _types(retried) == ["message.completed"]
    assert retried.usage == {"input_tokens": 20, "output_tokens": 7, "model_calls": 1, "tool_calls": 0}


async def test_parallel_tool_calls_replay_in_the_order_the_model_gave(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    server.script(
        calls(*(ToolCall(f"c{i}", "record", {"path": str(notes), "note": f"n{i}"}) for i in range(4))),
        answer("done"),
    )
    first = FakeRunContext({"prompt": "record four"})
    await Support(settings).run(first)
    for i in (1, 3):  # two results died with the worker
        del first.effects[f"openai-agents:0:tool:c{i}"]
    del first.effects["openai-agents:1:model"]
    server.script(answer("done again"))

    await Support(settings).run(first.retry())

    assert sorted(notes.read_text().split()) == ["n0", "n1", "n1", "n2", "n3", "n3"]  # c0, c2 ran once
    tool_messages = [m["tool_call_id"] for m in server.requests[2].body["messages"] if m["role"] == "tool"]
    assert tool_messages == ["c0", "c1", "c2", "c3"]
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]


async def test_a_tool_that_raised_is_an_error_result_the_model_reads(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("e1", "explode", {"reason": "no stock"})), answer("Sorry."))
    ctx = FakeRunContext({"prompt": "go"})

    await Support(settings).run(ctx)

    (result,) = ctx.of_type("tool.result")
    assert result["is_error"] is True and result["tool_call_id"] == "e1"
    assert server.requests[1].body["messages"][-1]["role"] == "tool"


async def test_approval_waits_then_runs_the_approved_call_once(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(calls(ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-1"})), answer("Refunded."))
    first = FakeRunContext({"prompt": "refund"})

    with pytest.raises(WaitRequested) as asked:
        await Support(settings).run(first)

    assert asked.value.name == "approval"
    assert asked.value.payload == {"tool_call_id": "r1", "name": "refund", "arguments": {"path": str(refunds), "order_id": "o-1"}}
    assert not refunds.exists()
    resumed = first.resume({"approved": True})
    output = await Support(settings).run(resumed)
    assert output["text"] == "Refunded." and refunds.read_text() == "refunded o-1\n"
    assert len(server.requests) == 2  # the resumed attempt replayed the first response
    assert resumed.of_type("tool.result") == [{"tool_call_id": "r1", "name": "refund", "output": "refunded o-1", "is_error": False}]

    again = resumed.retry()  # a crash after the approval: never asked again, never run again
    await Support(settings).run(again)
    assert again.asked == [] and refunds.read_text() == "refunded o-1\n"


async def test_a_denial_and_its_note_reach_the_model(server: FakeOpenAI, settings: Settings, tmp_path: Path) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(calls(ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-1"})), answer("Not refunded."))
    first = FakeRunContext({"prompt": "refund"})
    with pytest.raises(WaitRequested):
        await Support(settings).run(first)

    resumed = first.resume({"approved": False, "note": "over the limit"})
    await Support(settings).run(resumed)

    assert not refunds.exists()
    assert resumed.of_type("tool.result") == [
        {"tool_call_id": "r1", "name": "refund", "output": "denied: over the limit", "is_error": True}
    ]
    assert server.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "r1", "content": "denied: over the limit"}


async def test_two_calls_needing_approval_in_one_response_are_asked_in_turn(
    server: FakeOpenAI, settings: Settings, tmp_path: Path
) -> None:
    refunds = tmp_path / "refunds.txt"
    server.script(
        calls(*(ToolCall(f"r{i}", "refund", {"path": str(refunds), "order_id": f"o-{i}"}) for i in (1, 2))),
        answer("One of two."),
    )
    ctx = FakeRunContext({"prompt": "refund both"})
    asked = []
    for value in (None, {"approved": True}, {"approved": False, "note": "no"}):
        ctx = ctx if value is None else ctx.resume(value)
        try:
            output = await Support(settings).run(ctx)
        except WaitRequested as wait:  # the replayed calls must be approvable (no drift in the record)
            asked.append(wait.payload["tool_call_id"])

    assert asked == ["r1", "r2"] and output["text"] == "One of two."
    assert refunds.read_text() == "refunded o-1\n" and len(server.requests) == 2


async def test_a_handoff_is_an_event_and_the_agents_own_model_is_recorded(server: FakeOpenAI, settings: Settings) -> None:
    server.script(
        calls(ToolCall("h1", "transfer_to_billing", {})),
        calls(ToolCall("c1", "add", {"a": 2, "b": 2})),
        answer("Billing says 4."),
    )
    front = _handing_off(server)
    first = FakeRunContext({"prompt": "bill me"})

    output = await front(settings).run(first)

    assert output == {"text": "Billing says 4.", "agent": "billing"}
    assert _types(first) == ["agent.handoff", "tool.call", "tool.result", "message.completed"]
    assert first.of_type("agent.handoff") == [{"from": "front", "to": "billing"}]
    assert first.tool_calls == 1  # the handoff is no tool call
    assert [r.body["model"] for r in server.requests] == ["gpt-fake", "own-model", "own-model"]
    assert first.usage["model_calls"] == 3

    retried = first.retry()
    assert await front(settings).run(retried) == output
    assert retried.events == [] and len(server.requests) == 3  # the own model's answers replayed too


async def test_an_agent_used_as_a_tool_is_one_step(server: FakeOpenAI, settings: Settings) -> None:
    researcher = Agent(name="researcher", instructions="Find things.")
    lead = Agent(name="lead", tools=[researcher.as_tool("research", "Research a question.")])

    class Lead(OpenAIAgentsAgent):
        agent = lead

    server.script(calls(ToolCall("t1", "research", {"input": "why?"})), answer("because"), answer("It is because."))
    first = FakeRunContext({"prompt": "why?"})

    assert (await Lead(settings).run(first))["text"] == "It is because."
    assert sorted(first.effects) == ["openai-agents:0:model", "openai-agents:0:tool:t1", "openai-agents:1:model"]
    assert first.of_type("tool.result")[0]["output"] == "because"  # the inner run's answer

    retried = first.retry()
    assert (await Lead(settings).run(retried))["text"] == "It is because."
    assert len(server.requests) == 3 and retried.events == []  # the inner run was not run again


async def test_a_changed_request_on_replay_is_a_replay_mismatch(server: FakeOpenAI, settings: Settings) -> None:
    server.script(answer("hello"))
    first = FakeRunContext({"prompt": "hi"})
    await Drifting(settings).run(first)

    with pytest.raises(ReplayMismatch):
        await Drifting(settings).run(first.retry())  # attempt 2: its instructions say so
    assert len(server.requests) == 1


async def test_structured_output_is_data(server: FakeOpenAI, settings: Settings) -> None:
    server.script(answer('{"answer": "yes", "confidence": 0.75}'))
    ctx = FakeRunContext({"prompt": "is it?"})

    output = await Judge(settings).run(ctx)

    assert output == {"data": {"answer": "yes", "confidence": 0.75}, "agent": "judge"}


async def test_max_turns_is_the_sdks_and_holds_across_attempts(server: FakeOpenAI, settings: Settings) -> None:
    server.script(*(calls(ToolCall(f"c{i}", "add", {"a": i, "b": i})) for i in range(3)))
    first = FakeRunContext({"prompt": "loop"}, budget={"max_turns": 2})

    with pytest.raises(BudgetExceeded):
        await Support(settings).run(first)
    assert len(server.requests) == 2
    with pytest.raises(BudgetExceeded):  # the replayed turns count: the run, not the attempt
        await Support(settings).run(first.retry())
    assert len(server.requests) == 2


async def test_max_tool_calls_holds_across_attempts(server: FakeOpenAI, settings: Settings) -> None:
    server.script(calls(ToolCall("c1", "add", {"a": 1, "b": 1}), ToolCall("c2", "add", {"a": 2, "b": 2})))
    ctx = FakeRunContext({"prompt": "two"}, budget={"max_tool_calls": 1})

    with pytest.raises(BudgetExceeded):
        await Support(settings).run(ctx)


async def test_a_thread_is_the_runs_session_and_a_replay_stores_its_items_once(server: FakeOpenAI, settings: Settings) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t0", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t0", "content": "0"},
        {"role": "assistant", "content": "Hello."},
    ]
    server.script(calls(ToolCall("c1", "add", {"a": 2, "b": 3}), text="Adding."), answer("It is 5."))
    thread = ThreadView(uuid.uuid4(), history)
    first = FakeRunContext({"prompt": "2+3?", "system": "Be brief."}, thread=thread)

    await Support(settings).run(first)

    assert first.messages == [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "Adding.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": "It is 5."},
    ]  # fmt: skip
    sent = server.requests[0].body["messages"]
    assert sent[1:] == [{"role": "system", "content": "Be brief."}, *history, {"role": "user", "content": "2+3?"}]

    # the model step 1 was live but its record never committed, nor the messages with it (the
    # tool's turn): the retry stores those, and nothing twice
    stored = first.messages[:1]
    del first.effects["openai-agents:1:model"]
    server.script(answer("Five."))
    retried = first.retry()
    await Support(settings).run(retried)
    assert stored + retried.messages == [*first.messages[:3], {"role": "assistant", "content": "Five."}]


def test_chat_messages_and_items_round_trip() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x": 1}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "3"},
        {"role": "assistant", "content": "done"},
    ]  # fmt: skip
    assert to_chat(to_items(chat)) == chat
    assert to_chat([{"type": "reasoning", "summary": []}, {"role": "developer", "content": [{"type": "input_text", "text": "d"}]}]) == [
        {"role": "system", "content": "d"}
    ]


async def test_a_thread_message_without_a_role_is_invalid_input(settings: Settings) -> None:
    thread = ThreadView(uuid.uuid4(), [{"role": "robot", "content": "?"}])
    with pytest.raises(Exception, match="role"):
        await Support(settings).run(FakeRunContext({"prompt": "x"}, thread=thread))
