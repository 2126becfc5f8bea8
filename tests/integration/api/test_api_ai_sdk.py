"""The AI SDK chat routes (docs/frontends.md) with the demo agent and a real worker: the stream's
shape, the history as UIMessages, resume (204 when nothing is in flight), regenerate, and errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.protocols.ai_sdk_chunks import fold
from app.queue import Queue
from tests.api_support import new_key
from tests.worker_support import in_process_worker, wait_finished


@pytest.fixture
async def worker(database_url: str) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


# Tenants of this module's own: the in-process worker counts their tool calls in this process's
# metrics, which test_api_runs.py checks for "alice".
@pytest.fixture
async def alice(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "chat-a")


@pytest.fixture
async def bob(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "chat-b")


def chat_body(chat_id: str, text: str, **extra: Any) -> dict[str, Any]:
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", **extra}


def chunks(body: str) -> list[dict[str, Any]]:
    """The chunks of a whole UI message stream; it must end with ``[DONE]``."""
    assert "\r" not in body
    datas = [line.removeprefix("data: ") for line in body.split("\n") if line.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    return [json.loads(d) for d in datas[:-1]]


async def new_thread(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.post("/threads", json={}, headers=headers)
    assert response.status_code == 201
    return str(response.json()["id"])


DEMO = {"agent": "demo", "input": {"steps": 1, "step_s": 0.01}}


async def test_a_message_streams_its_run_as_chunks(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    chat = await new_thread(client, alice)
    response = await client.post("/ai-sdk/chat", json=chat_body(chat, "hello there", **DEMO), headers=alice)
    assert response.status_code == 200, response.text
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    got = chunks(response.text)
    start = got[0]
    assert start["type"] == "start"
    run_id = start["messageId"]
    assert start["messageMetadata"] == {"run_id": run_id, "thread_id": chat}
    kinds = [c["type"] for c in got]
    assert kinds[-1] == "finish" and "start-step" in kinds and "tool-input-available" in kinds
    text = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    assert text == "hello there"
    assert (await wait_finished(queue, uuid.UUID(run_id))).thread_id == uuid.UUID(chat)

    history = (await client.get(f"/ai-sdk/chat/{chat}/messages", headers=alice)).json()["items"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["parts"] == [{"type": "text", "text": "hello there"}]
    assert history[1] == fold(run_id, got[1:], start["messageMetadata"])

    # Nothing in flight: the resume has nothing to stream.
    assert (await client.get(f"/ai-sdk/chat/{chat}/stream", headers=alice)).status_code == 204


async def test_a_replay_is_byte_identical_and_regenerate_replaces_the_answer(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    chat = await new_thread(client, alice)
    first = await client.post("/ai-sdk/chat", json=chat_body(chat, "one", **DEMO), headers=alice)
    second = await client.post("/ai-sdk/chat", json=chat_body(chat, "two", **DEMO), headers=alice)
    runs = (await client.get(f"/threads/{chat}/runs", headers=alice)).json()["items"]
    assert len(runs) == 2  # one chat, one thread, a run per message
    assert chunks(first.text)[0]["messageId"] != chunks(second.text)[0]["messageId"]

    regenerated = await client.post(
        "/ai-sdk/chat", json=chat_body(chat, "two", trigger="regenerate-message", **DEMO), headers=alice
    )
    assert regenerated.status_code == 200
    new_id = chunks(regenerated.text)[0]["messageId"]
    await wait_finished(queue, uuid.UUID(new_id))
    history = (await client.get(f"/ai-sdk/chat/{chat}/messages", headers=alice)).json()["items"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 2
    assert history[-1]["id"] == new_id  # the regenerated answer replaced the second one
    messages = (await client.get(f"/threads/{chat}/messages", headers=alice)).json()["items"]
    assert [m["content"] for m in messages] == ["one", "one", "two", "two"]


async def test_a_wait_ends_the_answer_and_the_resume_is_a_204(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    chat = await new_thread(client, alice)
    body = chat_body(chat, "wait", agent="demo", input={"steps": 0, "wait": "go"})
    got = chunks((await client.post("/ai-sdk/chat", json=body, headers=alice)).text)
    assert [c["type"] for c in got][-3:] == ["data-runq-run.waiting", "finish-step", "finish"]
    assert (await client.get(f"/ai-sdk/chat/{chat}/stream", headers=alice)).status_code == 204
    history = (await client.get(f"/ai-sdk/chat/{chat}/messages", headers=alice)).json()["items"]
    assert [m["role"] for m in history] == ["user", "assistant"]


async def test_errors(client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]) -> None:
    chat = await new_thread(client, alice)
    no_text = {"id": chat, "messages": [], "trigger": "submit-message"}
    response = await client.post("/ai-sdk/chat", json=no_text, headers=alice)
    assert response.status_code == 422 and response.json()["code"] == "no_user_message"
    assistant = {"id": chat, "messages": [{"id": "x", "role": "assistant", "parts": []}]}
    response = await client.post("/ai-sdk/chat", json=assistant, headers=alice)
    assert response.json()["code"] == "no_user_message"
    response = await client.post("/ai-sdk/chat", json=chat_body(chat, "hi", agent="nope"), headers=alice)
    assert response.status_code == 422 and response.json()["code"] == "unknown_agent"
    assert (await client.post("/ai-sdk/chat", json=chat_body(chat, "hi"))).status_code == 401
    # A refused message names no new chat.
    response = await client.post("/ai-sdk/chat", json={"id": "never-made", "messages": []}, headers=alice)
    assert response.status_code == 422
    assert (await client.get("/threads", headers=alice)).json()["items"][0]["id"] == chat


async def test_a_chat_id_names_a_thread_of_the_callers_tenant_only(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    # Nothing yet: an empty history and nothing to resume.
    assert (await client.get("/ai-sdk/chat/support-42/messages", headers=alice)).json() == {"items": []}
    assert (await client.get("/ai-sdk/chat/support-42/stream", headers=alice)).status_code == 204
    first = chunks((await client.post("/ai-sdk/chat", json=chat_body("support-42", "a", **DEMO), headers=alice)).text)
    second = chunks((await client.post("/ai-sdk/chat", json=chat_body("support-42", "b", **DEMO), headers=alice)).text)
    thread = first[0]["messageMetadata"]["thread_id"]
    assert second[0]["messageMetadata"]["thread_id"] == thread
    assert (await client.get(f"/threads/{thread}", headers=alice)).json()["chat_id"] == "support-42"
    # The same chat id, or alice's thread id, names one of bob's own threads for bob.
    for name in ("support-42", thread):
        theirs = chunks((await client.post("/ai-sdk/chat", json=chat_body(name, "c", **DEMO), headers=bob)).text)
        assert theirs[0]["messageMetadata"]["thread_id"] != thread
    assert len((await client.get(f"/threads/{thread}/runs", headers=alice)).json()["items"]) == 2
    history = (await client.get(f"/ai-sdk/chat/{thread}/messages", headers=bob)).json()["items"]
    assert [textual["parts"][0]["text"] for textual in history if textual["role"] == "user"] == ["c"]


async def test_a_thread_token_reaches_its_own_chat_only(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    mine, other = await new_thread(client, alice), await new_thread(client, alice)
    token = (await client.post(f"/threads/{mine}/token", json={}, headers=alice)).json()["token"]
    browser = {"Authorization": f"Bearer {token}"}
    got = chunks((await client.post("/ai-sdk/chat", json=chat_body(mine, "from a page", **DEMO), headers=browser)).text)
    assert got[-1]["type"] == "finish"
    assert len((await client.get(f"/ai-sdk/chat/{mine}/messages", headers=browser)).json()["items"]) == 2
    for response in (
        await client.post("/ai-sdk/chat", json=chat_body(other, "x", **DEMO), headers=browser),
        await client.post("/ai-sdk/chat", json=chat_body("a-chat-id", "x", **DEMO), headers=browser),
        await client.get(f"/ai-sdk/chat/{other}/messages", headers=browser),
        await client.get(f"/ai-sdk/chat/{other}/stream", headers=browser),
    ):
        assert response.status_code == 401, response.text
    read_only = (await client.post(f"/threads/{mine}/token", json={"scopes": ["read"]}, headers=alice)).json()["token"]
    response = await client.post(
        "/ai-sdk/chat", json=chat_body(mine, "x", **DEMO), headers={"Authorization": f"Bearer {read_only}"}
    )
    assert (response.status_code, response.json()["code"]) == (403, "insufficient_scope")


async def test_an_approval_must_name_a_waiting_run_of_the_chat(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    chat, other = await new_thread(client, alice), await new_thread(client, alice)
    done = chunks((await client.post("/ai-sdk/chat", json=chat_body(chat, "hi", **DEMO), headers=alice)).text)
    run_id = done[0]["messageId"]
    await wait_finished(queue, uuid.UUID(run_id))
    part = {"type": "dynamic-tool", "state": "approval-responded", "approval": {"id": str(uuid.uuid4()), "approved": True}}
    answer = {"id": run_id, "role": "assistant", "parts": [part]}
    for chat_id in (chat, other):  # a finished run; a run of another chat
        response = await client.post("/ai-sdk/chat", json={"id": chat_id, "messages": [answer]}, headers=alice)
        assert (response.status_code, response.json()["code"]) == (409, "not_waiting")


async def test_regenerate_waits_for_no_answer_in_flight(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    chat = await new_thread(client, alice)
    body = chat_body(chat, "wait", agent="demo", input={"steps": 0, "wait": "go"})
    chunks((await client.post("/ai-sdk/chat", json=body, headers=alice)).text)  # now waiting
    again = chat_body(chat, "wait", trigger="regenerate-message", **DEMO)
    response = await client.post("/ai-sdk/chat", json=again, headers=alice)
    assert (response.status_code, response.json()["code"]) == (409, "thread_busy")


async def test_an_unstorable_input_is_a_validation_error(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    body = chat_body("nul-chat", "hi", agent="demo", input={"note": "a\u0000b"})
    response = await client.post("/ai-sdk/chat", json=body, headers=alice)
    assert (response.status_code, response.json()["code"]) == (422, "validation_error")
    assert (await client.get("/threads", headers=alice)).json()["items"] == []  # a refused message makes no chat


async def test_an_unstorable_chat_id_is_a_validation_error(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    json_body = {**alice, "content-type": "application/json"}
    for chat_id in ("a\u0000b", "\ud800"):  # json.dumps keeps the lone surrogate escaped
        response = await client.post("/ai-sdk/chat", content=json.dumps(chat_body(chat_id, "hi", **DEMO)), headers=json_body)
        assert (response.status_code, response.json()["code"]) == (422, "validation_error"), response.text
    for text in ("a\u0000b", "\ud800"):
        response = await client.post("/ai-sdk/chat", content=json.dumps(chat_body("nul-text", text, **DEMO)), headers=json_body)
        assert response.status_code == 422, response.text
    for path in ("/ai-sdk/chat/a%00b/messages", "/ai-sdk/chat/a%00b/stream"):
        response = await client.get(path, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, "validation_error"), response.text
    assert (await client.get("/threads", headers=alice)).json()["items"] == []


async def test_a_long_history_is_read_to_its_last_message(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], settings: Any
) -> None:
    """``DefaultChatTransport`` resends the whole chat: past RUNQ_MAX_BODY_BYTES, streamed in
    chunks, only the last message is kept; a message or a body over its own bound is a 413."""
    chat = await new_thread(client, alice)
    earlier = [
        {"id": f"m{i}", "role": "assistant" if i % 2 else "user", "parts": [{"type": "text", "text": "x" * 90_000}]}
        for i in range(14)
    ]
    body = chat_body(chat, "the new question", **DEMO)
    body["messages"] = [*earlier, *body["messages"]]
    raw = json.dumps(body).encode()
    assert len(raw) > 1 << 20 > settings.max_body_bytes

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(raw), 65_536):
            yield raw[i : i + 65_536]

    headers = alice | {"Content-Type": "application/json"}
    for content in (raw, chunked()):
        response = await client.post("/ai-sdk/chat", content=content, headers=headers)
        assert response.status_code == 200, response.text
        assert chunks(response.text)[-1]["type"] == "finish"
    history = (await client.get(f"/ai-sdk/chat/{chat}/messages", headers=alice)).json()["items"]
    assert [m["parts"][0]["text"] for m in history if m["role"] == "user"] == ["the new question"] * 2

    huge = chat_body(chat, "y" * (settings.max_body_bytes + 1), **DEMO)
    refused = await client.post("/ai-sdk/chat", json=huge, headers=alice)
    assert (refused.status_code, refused.json()["code"]) == (413, "body_too_large")
    assert "a message of the chat request" in refused.json()["detail"]
    too_long = b'{"id": "x", "messages": [' + b" " * settings.chat_max_body_bytes + b"]}"
    refused = await client.post("/ai-sdk/chat", content=too_long, headers=headers)
    assert (refused.status_code, refused.json()["code"]) == (413, "body_too_large")
    assert "prepareSendMessagesRequest" in refused.json()["detail"]
    broken = await client.post("/ai-sdk/chat", content=raw[:-3], headers=headers)
    assert (broken.status_code, broken.json()["code"]) == (400, "malformed_json")
