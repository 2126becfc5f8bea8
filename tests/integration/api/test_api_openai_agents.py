"""An OpenAI Agents SDK agent through the chat frontends' protocols (§15), on the in-process app
with a real worker and the fake model server: the AI SDK's stream, its approval round trip and
its history, and AG-UI's events, with nothing in those routes knowing the agent is one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings, get_settings
from tests.api_support import SECRET, new_key
from tests.fakes.agents_sdk_agents import AGENTS
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls
from tests.integration.api.test_api_ag_ui import frames
from tests.integration.api.test_api_ai_sdk import chat_body, chunks
from tests.worker_support import in_process_worker

AGENT_ENV = {"RUNQ_AGENTS": AGENTS, "RUNQ_OPENAI_API_KEY": "sk-test"}


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def agent_env(model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The worker builds its agents from the process's settings (as a worker process does)."""
    model.reset()
    env = AGENT_ENV | {"RUNQ_OPENAI_BASE_URL": model.base_url}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield env
    get_settings.cache_clear()


@pytest.fixture
def settings(database_url: str, agent_env: dict[str, str]) -> Settings:
    return Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2)


@pytest.fixture
async def worker(database_url: str, agent_env: dict[str, str]) -> AsyncIterator[None]:
    async with in_process_worker(database_url, agents=Settings().agents):
        yield


@pytest.fixture
async def owner(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "sdk-frontends")


def _of(stream: list[dict[str, Any]], type: str) -> list[dict[str, Any]]:
    return [c for c in stream if c["type"] == type]


async def test_a_chat_answer_streams_as_ui_message_chunks(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str], model: FakeOpenAI
) -> None:
    model.script(calls(ToolCall("c1", "add", {"a": 2, "b": 3}), text="Adding."), answer("It is 5."))
    chat = f"chat-{uuid.uuid4().hex[:8]}"

    response = await client.post("/ai-sdk/chat", json=chat_body(chat, "2+3?", agent="sdk-support"), headers=owner)

    stream = chunks(response.text)
    types = [c["type"] for c in stream if c["type"] != "text-delta" and not c["type"].startswith("data-runq-")]
    assert types == [
        "start", "start-step", "text-start", "text-end", "tool-input-start", "tool-input-available",
        "tool-output-available", "text-start", "text-end", "finish-step", "finish",
    ]  # fmt: skip
    assert "".join(c["delta"] for c in _of(stream, "text-delta")) == "Adding.It is 5."
    assert _of(stream, "tool-output-available")[0]["output"] == 5
    history = (await client.get(f"/ai-sdk/chat/{chat}/messages", headers=owner)).json()["items"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert [p["type"] for p in history[1]["parts"] if p["type"] in ("text", "dynamic-tool")] == ["text", "dynamic-tool", "text"]


async def test_an_approval_round_trip_through_the_chat(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str], model: FakeOpenAI, tmp_path: Path
) -> None:
    refunds = tmp_path / "refunds.txt"
    model.script(calls(ToolCall("r1", "refund", {"path": str(refunds), "order_id": "o-9"})), answer("Refunded o-9."))
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    first = chunks((await client.post("/ai-sdk/chat", json=chat_body(chat, "refund o-9", agent="sdk-support"), headers=owner)).text)
    (request,) = _of(first, "tool-approval-request")
    assert request["toolCallId"] == "r1" and not refunds.exists()
    run_id = first[0]["messageId"]

    part = {
        "type": "dynamic-tool", "toolName": "refund", "toolCallId": "r1", "state": "approval-responded",
        "input": {"path": str(refunds), "order_id": "o-9"}, "approval": {"id": request["approvalId"], "approved": True},
    }  # fmt: skip
    answered = {"id": chat, "trigger": "submit-message", "messages": [{"id": run_id, "role": "assistant", "parts": [part]}]}
    second = chunks((await client.post("/ai-sdk/chat", json=answered | {"agent": "sdk-support"}, headers=owner)).text)

    assert _of(second, "tool-output-available")[0]["output"] == "refunded o-9"
    assert "".join(c["delta"] for c in _of(second, "text-delta")) == "Refunded o-9."
    assert refunds.read_text() == "refunded o-9\n" and len(model.requests) == 2


async def test_a_run_streams_as_ag_ui_events(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str], model: FakeOpenAI
) -> None:
    model.script(calls(ToolCall("c1", "add", {"a": 1, "b": 1})), answer("Two."))
    sent = {
        "threadId": f"chat-{uuid.uuid4().hex[:8]}", "runId": str(uuid.uuid4()),
        "messages": [{"id": "u1", "role": "user", "content": "1+1?"}], "state": {}, "tools": [], "context": [],
    }  # fmt: skip

    events = [e for _, e in frames(await client.post("/ag-ui/sdk-support", json=sent, headers=owner))]

    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert {"TOOL_CALL_START", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"} <= set(types)
    assert events[-1]["result"] == {"text": "Two.", "agent": "support"}
