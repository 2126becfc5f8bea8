"""The ``openai`` agent against the fake OpenAI server (real HTTP) and an in-memory run context."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from app.agents.base import BudgetExceeded, FatalError, RetryableError, RunContext, WaitRequested
from app.agents.model_client import close_shared_clients, model_connections
from app.agents.openai import OpenAIAgent
from app.agents.tools import SHELL, ToolError, ToolRegistry
from app.settings import Settings
from tests.fakes import eventually
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls, error, stall
from tests.fakes.run_context import TIMED_OUT, FakeRunContext

notes: list[str] = []
registry = ToolRegistry([SHELL])


@registry.tool(
    parameters={"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
    side_effect=True,
)
async def record(ctx: RunContext, args: dict[str, Any]) -> dict[str, Any]:
    """Remember a note (a side effect that must happen once)."""
    notes.append(args["note"])
    return {"recorded": args["note"]}


@registry.tool(parameters={"type": "object", "properties": {}})
async def broken(ctx: RunContext, args: dict[str, Any]) -> None:
    """Always fails."""
    raise ToolError("the widget is jammed")


class Agent(OpenAIAgent):
    tools = registry
    backoff_s = 0.01


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeOpenAI) -> FakeOpenAI:
    notes.clear()
    shared_server.reset()
    return shared_server


@pytest.fixture
async def agent(server: FakeOpenAI) -> AsyncIterator[Agent]:
    yield Agent(
        Settings(openai_base_url=server.base_url, openai_api_key="sk-test-key", openai_model="m-1")
    )
    await close_shared_clients()


def _types(ctx: FakeRunContext) -> list[str]:
    return [t for t, _ in ctx.events if t != "message.delta"]


async def test_two_tool_conversation(server: FakeOpenAI, agent: Agent) -> None:
    server.script(
        calls(
            ToolCall("call_1", "shell", {"command": "echo hello from the shell"}),
            ToolCall(
                "call_2", "record", {"note": "a long note, split across many argument deltas"}
            ),
            text="Let me check.",
        ),
        answer("All done: hello."),
    )
    ctx = FakeRunContext(
        {
            "prompt": "say hello",
            "system": "be brief",
            "tools": ["shell", "record"],
            "temperature": 0.2,
        }
    )

    assert await agent.run(ctx) == {"text": "All done: hello."}

    assert _types(ctx) == [
        "message.completed",
        "tool.call",
        "tool.result",
        "tool.call",
        "tool.result",
        "message.completed",
    ]
    assert (
        "".join(d["text"] for d in ctx.of_type("message.delta")) == "Let me check.All done: hello."
    )
    assert [d["text"] for d in ctx.of_type("message.completed")] == [
        "Let me check.",
        "All done: hello.",
    ]
    assert ctx.of_type("tool.call") == [
        {
            "tool_call_id": "call_1",
            "name": "shell",
            "arguments": {"command": "echo hello from the shell"},
        },
        {
            "tool_call_id": "call_2",
            "name": "record",
            "arguments": {"note": "a long note, split across many argument deltas"},
        },
    ]
    assert ctx.of_type("tool.result") == [
        {
            "tool_call_id": "call_1",
            "output": {"exit_code": 0, "output": "hello from the shell\n"},
            "is_error": False,
        },
        {"tool_call_id": "call_2", "output": {"recorded": notes[0]}, "is_error": False},
    ]
    assert ctx.turns == 2 and ctx.tool_calls == 2
    assert len(ctx.checkpoints) == 3  # the tool-calling turn, then each tool result

    first, second = (r.body for r in server.requests)
    assert [r.authorization for r in server.requests] == ["Bearer sk-test-key"] * 2
    assert first["model"] == "m-1" and first["stream"] is True and first["temperature"] == 0.2
    assert [t["function"]["name"] for t in first["tools"]] == ["shell", "record"]
    assert first["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "say hello"},
    ]
    assistant, shell_result, record_result = second["messages"][2:]
    assert assistant["content"] == "Let me check."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert json.loads(shell_result["content"]) == {
        "exit_code": 0,
        "output": "hello from the shell\n",
    }
    assert record_result["tool_call_id"] == "call_2"
    assert ctx.checkpoints[-1] == {"messages": second["messages"]}


async def test_tool_errors_go_back_to_the_model(server: FakeOpenAI, agent: Agent) -> None:
    server.script(
        calls(
            ToolCall("c1", "record", '{"note": "unterminated'),
            ToolCall("c2", "nope", {}),
            ToolCall("c3", "broken", {}),
            ToolCall("c4", "shell", {"command": "exit 3"}),
        ),
        answer("sorry"),
    )
    ctx = FakeRunContext({"prompt": "try", "tools": ["record", "broken", "shell"]})

    assert await agent.run(ctx) == {"text": "sorry"}

    results = {r["tool_call_id"]: r for r in ctx.of_type("tool.result")}
    assert all(r["is_error"] for r in results.values())
    assert "not valid JSON" in results["c1"]["output"]
    assert "no tool named 'nope'" in results["c2"]["output"]
    assert results["c3"]["output"] == "the widget is jammed"
    assert results["c4"]["output"] == {"exit_code": 3, "output": ""}
    assert ctx.of_type("tool.call")[0]["arguments"] == '{"note": "unterminated'
    tool_messages = server.requests[1].body["messages"][-4:]
    assert json.loads(tool_messages[2]["content"]) == {"error": "the widget is jammed"}
    assert notes == []


async def test_tool_calls_count_against_the_budget(server: FakeOpenAI, agent: Agent) -> None:
    server.script(
        calls(ToolCall("c1", "record", {"note": "1"}), ToolCall("c2", "record", {"note": "2"}))
    )
    ctx = FakeRunContext({"prompt": "go", "tools": ["record"]}, budget={"max_tool_calls": 1})

    with pytest.raises(BudgetExceeded):
        await agent.run(ctx)
    assert notes == ["1"]


async def test_cancel_closes_the_stream_mid_tokens(server: FakeOpenAI, agent: Agent) -> None:
    server.script(stall("tokens keep coming"))
    ctx = FakeRunContext({"prompt": "talk"})
    task = asyncio.create_task(agent.run(ctx))
    await eventually(lambda: ctx.of_type("message.delta"))

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await eventually(lambda: server.requests[0].disconnected)
    assert not ctx.of_type("message.completed")


async def test_a_capped_model_connection_makes_the_next_turn_wait(server: FakeOpenAI) -> None:
    capped = Agent(Settings(openai_base_url=server.base_url, openai_max_connections=1))
    server.script(stall("the first turn holds the only connection"), answer("second"))
    first_ctx, second_ctx = FakeRunContext({"prompt": "one"}), FakeRunContext({"prompt": "two"})
    waits = REGISTRY.get_sample_value("runq_model_pool_wait_seconds_count") or 0.0
    first = asyncio.create_task(capped.run(first_ctx))
    await eventually(lambda: first_ctx.of_type("message.delta"))
    second = asyncio.create_task(capped.run(second_ctx))
    connections = model_connections(server.base_url + "/", 1)
    try:
        await eventually(lambda: connections.waiting == 1)
        assert len(server.requests) == 1  # the second turn has not reached the model

        first.cancel()
        assert await second == {"text": "second"}
        with pytest.raises(asyncio.CancelledError):
            await first
    finally:
        await close_shared_clients()
    assert REGISTRY.get_sample_value("runq_model_pool_wait_seconds_count") == waits + 1


async def test_retry_resumes_from_the_checkpoint(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "once"})), stall("thinking"))
    first = FakeRunContext({"prompt": "go", "tools": ["record"]})
    task = asyncio.create_task(agent.run(first))
    await eventually(lambda: len(server.requests) == 2)
    task.cancel()  # the attempt dies during the second turn
    with pytest.raises(asyncio.CancelledError):
        await task

    server.script(answer("done"))
    retry = first.retry()
    assert await agent.run(retry) == {"text": "done"}

    assert notes == ["once"]
    assert len(server.requests) == 3
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]
    assert _types(retry) == ["message.completed"]


async def test_resumed_call_replays_the_effect_ledger(server: FakeOpenAI, agent: Agent) -> None:
    """Stopped after ``c2`` ran but before its result was checkpointed: the ledger answers."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "record", "arguments": '{"note": "x"}'},
            }
            for cid in ("c1", "c2", "c3")
        ],
    }
    state = {
        "messages": [
            {"role": "user", "content": "go"},
            assistant,
            {"role": "tool", "tool_call_id": "c1", "content": '{"recorded": "x"}'},
        ]
    }
    ledger = {"openai:1:c2": {"output": {"recorded": "from the ledger"}, "is_error": False}}
    server.script(answer("ok"))
    ctx = FakeRunContext(
        {"prompt": "go", "tools": ["record"]}, attempt=2, resume_state=state, effects=ledger
    )

    assert await agent.run(ctx) == {"text": "ok"}

    assert notes == ["x"]  # only c3 ran
    assert [r["tool_call_id"] for r in ctx.of_type("tool.result")] == ["c2", "c3"]
    assert ctx.of_type("tool.result")[0]["output"] == {"recorded": "from the ledger"}
    assert len(server.requests) == 1
    assert [m.get("tool_call_id") for m in server.requests[0].body["messages"][2:]] == [
        "c1",
        "c2",
        "c3",
    ]


async def test_rate_limit_then_success(server: FakeOpenAI, agent: Agent) -> None:
    server.script(error(429, "slow down", retry_after="0"), error(503, "overloaded"), answer("hi"))
    ctx = FakeRunContext({"prompt": "hello"})

    assert await agent.run(ctx) == {"text": "hi"}
    assert len(server.requests) == 3


async def test_transient_errors_exhaust_into_a_retryable_failure(
    server: FakeOpenAI, agent: Agent
) -> None:
    server.script(*[error(500, "boom")] * 4)

    with pytest.raises(RetryableError) as raised:
        await agent.run(FakeRunContext({"prompt": "hello"}))

    assert raised.value.code == "model_unavailable" and "boom" in str(raised.value)
    assert len(server.requests) == 4  # the first try and three retries


async def test_a_long_retry_after_goes_back_to_the_queue(server: FakeOpenAI, agent: Agent) -> None:
    server.script(error(429, "quota", retry_after="3600"))

    with pytest.raises(RetryableError):
        await agent.run(FakeRunContext({"prompt": "hello"}))
    assert len(server.requests) == 1


async def test_unreachable_model_is_retryable() -> None:
    agent = Agent(Settings(openai_base_url="http://127.0.0.1:9/v1"))
    try:
        with pytest.raises(RetryableError) as raised:
            await agent.run(FakeRunContext({"prompt": "hello"}))
    finally:
        await close_shared_clients()
    assert raised.value.code == "model_unavailable"


async def test_client_error_is_fatal_with_the_providers_message(
    server: FakeOpenAI, agent: Agent
) -> None:
    server.script(error(400, "This model's maximum context length is 8192 tokens"))

    with pytest.raises(FatalError) as raised:
        await agent.run(FakeRunContext({"prompt": "hello"}))

    assert raised.value.code == "model_error"
    assert "HTTP 400: This model's maximum context length is 8192 tokens" in str(raised.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("input", "message"),
    [
        ({}, "needs `prompt`"),
        ({"messages": "hi"}, "messages: Input should be a valid list"),
        ({"prompt": "x", "tools": ["rm -rf"]}, "unknown tool 'rm -rf'"),
        ({"prompt": "x", "temperature": "hot"}, "temperature: Input should be a valid number"),
    ],
)
async def test_invalid_input_is_fatal(agent: Agent, input: dict[str, Any], message: str) -> None:
    with pytest.raises(FatalError, match=message) as raised:
        await agent.run(FakeRunContext(input))
    assert raised.value.code == "invalid_input"


async def test_messages_input_and_turn_budget(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "n"})))
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ctx = FakeRunContext(
        {"messages": [*history, {"role": "user", "content": "note it"}], "tools": ["record"]},
        budget={"max_turns": 1},
    )

    with pytest.raises(BudgetExceeded):
        await agent.run(ctx)
    assert server.requests[0].body["messages"][:2] == history
    assert len(server.requests) == 1


async def test_secrets_are_redacted_from_errors_and_tool_output(
    server: FakeOpenAI, agent: Agent
) -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    server.script(
        calls(ToolCall("c1", "shell", {"command": f"echo OPENAI_API_KEY={key}"})),
        error(401, f"Incorrect API key provided: {key}"),
    )
    ctx = FakeRunContext({"prompt": "leak", "tools": ["shell"]})

    with pytest.raises(FatalError) as raised:
        await agent.run(ctx)

    assert "Incorrect API key provided: [REDACTED]" in str(raised.value)
    assert key not in json.dumps(server.requests[1].body["messages"][-1])
    assert key not in ctx.checkpoints[-1]["messages"][-1]["content"]


async def test_no_key_for_api_openai_com_fails_at_once_without_a_request() -> None:
    agent = OpenAIAgent(Settings(openai_api_key=None, openai_base_url="https://api.openai.com/v1"))
    ctx = FakeRunContext({"prompt": "hello"})
    with pytest.raises(FatalError, match="RUNQ_OPENAI_API_KEY is not set") as raised:
        await agent.run(ctx)
    assert raised.value.code == "model_not_configured"
    assert _types(ctx) == []  # it never reached the model


async def test_usage_chunks_are_recorded_and_a_model_without_them_counts_calls(
    server: FakeOpenAI, agent: Agent
) -> None:
    server.script(
        calls(ToolCall("call_1", "record", {"note": "n"}), usage=(40, 7)),
        answer("ok"),  # this model sends no usage chunk
    )
    ctx = FakeRunContext({"prompt": "hi", "tools": ["record"]})

    assert await agent.run(ctx) == {"text": "ok"}

    assert ctx.usage == {"input_tokens": 40, "output_tokens": 7, "model_calls": 2, "tool_calls": 0}
    assert all(r.body["stream_options"] == {"include_usage": True} for r in server.requests)


async def test_max_tokens_raises_on_the_usage_chunk_before_the_tools_run(
    server: FakeOpenAI, agent: Agent
) -> None:
    server.script(calls(ToolCall("call_1", "record", {"note": "never"}), usage=(90, 20)))
    ctx = FakeRunContext({"prompt": "hi", "tools": ["record"]}, budget={"max_tokens": 100})

    with pytest.raises(BudgetExceeded):
        await agent.run(ctx)

    assert notes == [] and ctx.of_type("message.completed") == []


# -- approval of tools (docs/waits.md) ------------------------------------------------------


class CrashAfterTool(FakeRunContext):
    """The worker dies right after the approved tool ran and its effect was recorded, before
    the tool result's checkpoint."""

    async def checkpoint(self, state: Any) -> None:
        if self.effects:
            raise RuntimeError("SIGKILL")
        await super().checkpoint(state)


APPROVAL_INPUT = {"prompt": "note it", "tools": ["shell", "record"], "approve_tools": ["record"]}


async def _asks_approval(agent: Agent, ctx: FakeRunContext) -> WaitRequested:
    with pytest.raises(WaitRequested) as waited:
        await agent.run(ctx)
    return waited.value


async def test_approved_call_runs_once(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "ship it"})), answer("noted"))
    first = FakeRunContext(APPROVAL_INPUT)
    wait = await _asks_approval(agent, first)
    assert (wait.name, wait.occurrence) == ("approval", 1)
    assert wait.payload == {"tool_call_id": "c1", "name": "record", "arguments": {"note": "ship it"}}
    assert notes == [] and first.of_type("tool.call") == []  # nothing ran before the decision

    resumed = first.resume({"approved": True})
    assert await agent.run(resumed) == {"text": "noted"}
    assert notes == ["ship it"]
    assert resumed.of_type("tool.result") == [{"tool_call_id": "c1", "output": {"recorded": "ship it"}, "is_error": False}]
    assert len(server.requests) == 2  # the resumed attempt did not ask the model again for the first turn


async def test_denied_call_never_runs_and_the_model_hears_why(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "rm -rf"})), answer("understood"))
    first = FakeRunContext(APPROVAL_INPUT)
    await _asks_approval(agent, first)
    resumed = first.resume({"approved": False, "note": "too risky"})
    assert await agent.run(resumed) == {"text": "understood"}
    assert notes == []
    assert resumed.of_type("tool.result") == [{"tool_call_id": "c1", "output": "denied: too risky", "is_error": True}]
    tool_message = server.requests[1].body["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"error": "denied: too risky"})}


async def test_crash_after_approval_does_not_run_the_tool_twice(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "once"})), answer("done"))
    first = FakeRunContext(APPROVAL_INPUT)
    await _asks_approval(agent, first)
    first.waits[("approval", 1)] = {"approved": True}
    doomed = CrashAfterTool(first.input, resume_state=first.checkpoints[-1], effects=first.effects, waits=first.waits)
    with pytest.raises(RuntimeError, match="SIGKILL"):
        await agent.run(doomed)
    assert notes == ["once"]
    after = doomed.retry()  # from the checkpoint before the tool: the approval and the effect replay
    assert await agent.run(after) == {"text": "done"}
    assert notes == ["once"] and after.asked == []


async def test_two_gated_calls_wait_in_turn_and_ungated_tools_do_not(server: FakeOpenAI, agent: Agent) -> None:
    server.script(
        calls(
            ToolCall("c1", "record", {"note": "a"}),
            ToolCall("c2", "shell", {"command": "echo free"}),
            ToolCall("c3", "record", {"note": "b"}),
        ),
        answer("both"),
    )
    first = FakeRunContext(APPROVAL_INPUT)
    await _asks_approval(agent, first)
    second = first.resume({"approved": True})
    wait = await _asks_approval(agent, second)
    assert (wait.occurrence, wait.payload["tool_call_id"]) == (2, "c3")
    third = second.resume({"approved": True})
    assert await agent.run(third) == {"text": "both"}
    assert notes == ["a", "b"]
    every = [d["tool_call_id"] for ctx in (first, second, third) for d in ctx.of_type("tool.result")]
    assert every == ["c1", "c2", "c3"]  # each call's result once, across the three attempts


async def test_approve_everything_and_time_out(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "shell", {"command": "echo hi"})), answer("ok"))
    first = FakeRunContext({"prompt": "x", "tools": ["shell"], "approve_tools": "*"})
    await _asks_approval(agent, first)
    resumed = first.resume(TIMED_OUT)
    assert await agent.run(resumed) == {"text": "ok"}
    assert resumed.of_type("tool.result")[0]["output"].startswith("denied:")


@pytest.mark.parametrize("bad", [{"approve_tools": "all"}, {"approve_tools": [1]}, {"approval_timeout_s": -1}])
async def test_bad_approval_input_is_fatal(server: FakeOpenAI, agent: Agent, bad: dict[str, Any]) -> None:
    with pytest.raises(FatalError):
        await agent.run(FakeRunContext({"prompt": "x", "approve_tools": ["shell"]} | bad))


async def test_a_wait_does_not_count_the_gated_call_twice(server: FakeOpenAI, agent: Agent) -> None:
    server.script(calls(ToolCall("c1", "record", {"note": "n"})), answer("ok"))
    first = FakeRunContext(APPROVAL_INPUT, budget={"max_tool_calls": 1})
    await _asks_approval(agent, first)
    assert first.tool_calls == 0
    resumed = first.resume({"approved": True})
    assert await agent.run(resumed) == {"text": "ok"}
    assert resumed.tool_calls == 1
