"""Chat ids and thread tokens (docs/threads.md, "Browser tokens"): a browser with a token of one
thread reads it, starts, follows, cancels and resumes its runs through a real worker, within its
scopes, its binding and its lifetime; and CORS for a frontend on another origin."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.tokens import issue_thread_token
from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import SECRET, parse_sse
from tests.worker_support import in_process_worker, wait_until

ORIGIN = "http://chat.example:5173"


async def new_thread(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/threads", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def mint(client: httpx.AsyncClient, headers: dict[str, str], thread_id: str, **body: Any) -> dict[str, str]:
    """``Authorization`` with a new thread token."""
    response = await client.post(f"/threads/{thread_id}/token", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def problem(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


async def test_chat_ids_are_unique_per_tenant(client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]) -> None:
    thread = await new_thread(client, alice, chat_id="chat-1")
    assert thread["chat_id"] == "chat-1"
    assert problem(await client.post("/threads", json={"chat_id": "chat-1"}, headers=alice)) == (409, "chat_id_conflict")
    assert (await new_thread(client, bob, chat_id="chat-1"))["id"] != thread["id"]  # another tenant's name
    # an idempotent repeat is still the same thread, not a conflict
    keyed = {"Idempotency-Key": "k1"} | alice
    first = await client.post("/threads", json={"chat_id": "chat-2"}, headers=keyed)
    again = await client.post("/threads", json={"chat_id": "chat-2"}, headers=keyed)
    assert (first.status_code, again.status_code, again.json()["id"]) == (201, 200, first.json()["id"])
    for bad in ("", "a/b", "with space", "x" * 201, 5):
        assert problem(await client.post("/threads", json={"chat_id": bad}, headers=alice))[0] == 422, bad


async def test_a_chat_id_names_one_thread_however_many_ask_at_once(queue: Queue) -> None:
    found = await asyncio.gather(*(queue.thread_for_chat(tenant_id="t1", chat_id="c") for _ in range(8)))
    assert len({thread.id for thread, _ in found}) == 1
    assert sum(created for _, created in found) == 1
    thread = found[0][0]
    assert (await queue.named_thread("c", tenant_id="t1")).id == thread.id
    assert (await queue.named_thread(str(thread.id), tenant_id="t1")).id == thread.id
    # another tenant: the id names nothing of theirs, so it is a chat id of their own
    theirs = await queue.named_thread(str(thread.id), tenant_id="t2", create=True)
    assert (theirs.id, theirs.chat_id) != (thread.id, None) and theirs.chat_id == str(thread.id)
    with pytest.raises(Exception, match="new"):
        await queue.named_thread("new", tenant_id="t1")


@pytest.fixture
async def worker(database_url: str) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


async def test_a_browser_does_everything_with_a_token(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    thread = await new_thread(client, alice, chat_id="c-browser")
    token = await mint(client, alice, thread["id"])
    assert (await client.get(f"/threads/{thread['id']}", headers=token)).json() == (
        await client.get(f"/threads/{thread['id']}", headers=alice)
    ).json()
    created = await client.post(
        f"/threads/{thread['id']}/runs", json={"agent": "demo", "input": {"prompt": "hi", "steps": 1}}, headers=token
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    stream = await client.get(f"/runs/{run_id}/events", headers=token)  # follows the run to its end
    assert [f.event for f in parse_sse(stream.text)][-1] == "run.completed"
    messages = (await client.get(f"/threads/{thread['id']}/messages", headers=token)).json()["items"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert [r["id"] for r in (await client.get(f"/threads/{thread['id']}/runs", headers=token)).json()["items"]] == [run_id]

    # wait, resume with the token (in the query string, as EventSource would), then Stop
    waits = await client.post(
        f"/threads/{thread['id']}/runs",
        json={"agent": "demo", "input": {"prompt": "ok?", "steps": 1, "step_s": 0.01, "wait": "approval"}},
        headers=token,
    )
    waiting = waits.json()["id"]

    async def held() -> bool:
        return (await client.get(f"/runs/{waiting}", headers=alice)).json()["status"] == "waiting"

    await wait_until(held, within=15, what="the run to wait")
    query = {"token": token["Authorization"].removeprefix("Bearer ")}
    resumed = await client.post(f"/runs/{waiting}/resume", params=query, json={"value": {"approved": True}})
    assert resumed.status_code == 202, resumed.text
    long = await client.post(
        f"/threads/{thread['id']}/runs", json={"agent": "demo", "input": {"steps": 200, "step_s": 0.05}}, headers=token
    )
    cancelled = await client.post(f"/runs/{long.json()['id']}/cancel", headers=token)
    assert cancelled.status_code == 202, cancelled.text


async def test_scopes_lifetime_and_what_a_token_may_not_choose(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread = await new_thread(client, alice)
    runs = f"/threads/{thread['id']}/runs"
    reader = await mint(client, alice, thread["id"], scopes=["read"], ttl_s=30)
    assert (await client.get(f"/threads/{thread['id']}", headers=reader)).status_code == 200
    assert problem(await client.post(runs, json={"agent": "demo"}, headers=reader)) == (403, "insufficient_scope")
    run_id = (await client.post(runs, json={"agent": "demo"}, headers=alice)).json()["id"]
    for route in ("cancel", "resume"):
        response = await client.post(f"/runs/{run_id}/{route}", json={"value": 1}, headers=reader)
        assert problem(response) == (403, "insufficient_scope"), route

    runner = await mint(client, alice, thread["id"], scopes=["run"])
    for field, value in (("budget", {"max_turns": 1}), ("priority", 5), ("max_attempts", 1), ("delay_s", 0),
                         ("webhook", {"url": "https://example.com/h"})):  # fmt: skip
        response = await client.post(runs, json={"agent": "demo", field: value}, headers=runner)
        assert problem(response) == (403, "field_not_allowed"), field
    assert (await client.post(runs, json={"agent": "demo", "on_disconnect": "cancel"}, headers=runner)).status_code == 201

    bound = await mint(client, alice, thread["id"], agent="demo", input={"steps": 2, "tools": []})
    assert problem(await client.post(runs, json={"agent": "openai"}, headers=bound)) == (403, "agent_not_allowed")
    made = await client.post(runs, json={"agent": "demo", "input": {"steps": 9, "prompt": "p"}}, headers=bound)
    assert made.json()["input"] == {"steps": 2, "tools": [], "prompt": "p"}

    expired, _ = issue_thread_token(
        SECRET, tenant_id="alice", thread_id=uuid.UUID(thread["id"]), scopes=["read"], ttl_s=1, now=time.time() - 2
    )
    response = await client.get(f"/threads/{thread['id']}", headers={"Authorization": f"Bearer {expired}"})
    assert problem(response) == (401, "token_expired")
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_minting_a_token(client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]) -> None:
    thread = await new_thread(client, alice)
    path = f"/threads/{thread['id']}/token"
    answer = (await client.post(path, headers=alice)).json()
    assert answer["scopes"] == ["cancel", "read", "resume", "run"] and answer["thread_id"] == thread["id"]
    assert (answer["agent"], answer["input"]) == (None, None)
    assert problem(await client.post(path, headers=bob)) == (404, "not_found")
    assert problem(await client.post(path, json={"agent": "nope"}, headers=alice)) == (422, "unknown_agent")
    for bad in ({"ttl_s": 86401}, {"ttl_s": 0}, {"scopes": ["admin"]}, {"scopes": []}, {"input": {"x": "y" * 5000}}):
        assert problem(await client.post(path, json=bad, headers=alice)) == (422, "validation_error"), bad
    # a token cannot mint another
    token = await mint(client, alice, thread["id"])
    assert problem(await client.post(path, headers=token)) == (401, "unauthorized")


async def cors_client(settings: Settings, origins: str) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(settings.model_copy(update={"cors_origins": Settings(cors_origins=origins).cors_origins}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:
            yield client


def preflight(origin: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, last-event-id",
    }


async def test_cors_preflight_and_exposed_headers(settings: Settings, alice: dict[str, str]) -> None:
    async for client in cors_client(settings, f"{ORIGIN}, https://other.example"):
        allowed = await client.options("/threads/x/runs", headers=preflight(ORIGIN))
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        named = {h.strip().lower() for h in allowed.headers["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "last-event-id"} <= named
        refused = await client.options("/threads/x/runs", headers=preflight("https://evil.example"))
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
        answer = await client.get("/threads", headers=alice | {"Origin": ORIGIN})
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert "retry-after" in answer.headers["access-control-expose-headers"].lower()
    async for client in cors_client(settings, ""):  # the default: no CORS at all
        response = await client.options("/threads/x/runs", headers=preflight(ORIGIN))
        assert "access-control-allow-origin" not in response.headers


async def test_a_refused_origin_is_logged_once_with_the_setting_to_change(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    for origins, listed in ((ORIGIN, f"RUNQ_CORS_ORIGINS={ORIGIN},http://127.0.0.1:5173"), ("", "RUNQ_CORS_ORIGINS=http://127.0.0.1:5173")):
        caplog.clear()
        async for client in cors_client(settings, origins):
            for _ in range(3):
                await client.options("/ai-sdk/chat", headers=preflight("http://127.0.0.1:5173"))
            await client.options("/ai-sdk/chat", headers=preflight(ORIGIN))
        advice = [r.getMessage() for r in caplog.records if r.name == "app.api.cors"]
        if origins:
            assert len(advice) == 1, advice  # once, and never for a listed origin
        else:
            assert len(advice) == 2, advice  # no origin is listed: each is logged once
        assert "http://127.0.0.1:5173" in advice[0] and listed in advice[0] and "/ai-sdk/chat" in advice[0]


async def test_a_refused_credential_is_told_what_is_wrong(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    """A valid token on a route that needs a key, and a key without ``Bearer``, are not
    "unknown or revoked" keys."""
    thread = (await client.post("/threads", json={}, headers=alice)).json()
    token = await mint(client, alice, thread["id"])
    run = (await client.post("/runs", json={"agent": "demo", "input": {}}, headers=alice)).json()
    stream = (await client.post(f"/runs/{run['id']}/stream-token", headers=alice)).json()["token"]
    key = alice["Authorization"].removeprefix("Bearer ")

    def detail(headers: dict[str, str]) -> str:
        return str(response_detail[headers["Authorization"]])

    response_detail = {
        h["Authorization"]: (await client.get("/runs", headers=h)).json()["detail"]
        for h in (token, {"Authorization": f"Bearer {stream}"}, {"Authorization": key}, {"Authorization": "Basic eDp5"}, {"Authorization": "Bearer rq_nope"})
    }
    assert "thread token" in detail(token) and "needs an API key" in detail(token)
    assert "stream token" in detail({"Authorization": f"Bearer {stream}"})
    assert "without its scheme: send Authorization: Bearer rq_" in detail({"Authorization": key})
    assert key not in detail({"Authorization": key})
    assert "another scheme" in detail({"Authorization": "Basic eDp5"})
    assert detail({"Authorization": "Bearer rq_nope"}) == "the API key is unknown or revoked"
    assert (await client.get(f"/threads/{thread['id']}/messages", headers=token)).status_code == 200
