"""Requests the server does not answer yet (threads §8, resume §9), held to the documented
contract by an in-memory transport that answers as the contract says and records what it got."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from runq_client import AsyncClient, Client, Message, RunqError, Thread

from tests.clients.test_client_unit import run_json

THREAD = {
    "id": "7d000000-0000-0000-0000-000000000001", "tenant_id": "t", "metadata": {"user": "ana"},
    "status": "idle", "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
    "last_run_id": None, "message_count": 1,
}  # fmt: skip
MESSAGE = {"index": 0, "role": "user", "content": "hi", "run_id": "r", "created_at": "2026-12-01T10:00:00Z"}


class ContractServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any, httpx.Headers]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, str(request.url.copy_with(scheme="http", host="x")), body, request.headers))
        path = request.url.path
        if path.endswith("/resume"):
            if body.get("waitpoint_id") == "stale":
                return httpx.Response(409, json={"code": "not_waiting", "detail": "not the open waitpoint"})
            return httpx.Response(202, json=run_json())
        if request.method == "DELETE":
            return httpx.Response(204)
        if path.endswith("/messages"):
            return httpx.Response(200, json={"items": [MESSAGE], "next_cursor": None})
        if path.endswith("/runs"):
            if request.method == "POST":
                return httpx.Response(201, json=run_json() | {"thread_id": THREAD["id"]})
            return httpx.Response(200, json={"items": [run_json()], "next_cursor": "c2"})
        if path == "/threads" and request.method == "GET":
            return httpx.Response(200, json={"items": [THREAD], "next_cursor": None})
        return httpx.Response(201 if request.method == "POST" else 200, json=THREAD)


def test_threads_and_resume_follow_the_contract() -> None:
    server = ContractServer()
    client = Client("http://x", "rq_k", http=httpx.Client(base_url="http://x", transport=httpx.MockTransport(server)))
    thread = client.threads.create(metadata={"user": "ana"})
    assert isinstance(thread, Thread) and thread.metadata == {"user": "ana"} and thread.status == "idle"
    assert client.threads.get(thread.id).message_count == 1
    assert [t.id for t in client.threads.list(limit=10).items] == [thread.id]
    messages = client.threads.messages(thread.id)
    assert isinstance(messages.items[0], Message) and messages.items[0].content == "hi"
    run = client.threads.runs.create(thread.id, "demo", {"prompt": "again"}, multitask_strategy="interrupt")
    assert run.thread_id == thread.id
    assert client.threads.runs.list(thread.id, limit=5).next_cursor == "c2"
    assert client.threads.delete(thread.id) is None
    assert client.runs.resume(run.id, {"approved": True}, waitpoint_id="w1").status == "pending"
    with pytest.raises(RunqError) as stale:
        client.runs.resume(run.id, {"approved": True}, waitpoint_id="stale")
    assert (stale.value.status, stale.value.code) == (409, "not_waiting")
    with pytest.raises(ValueError, match="multitask_strategy"):
        client.threads.runs.create(thread.id, "demo", multitask_strategy="later")

    sent = [(method, url, body) for method, url, body, _ in server.requests]
    tid = thread.id
    assert sent == [
        ("POST", "http://x/threads", {"metadata": {"user": "ana"}}),
        ("GET", f"http://x/threads/{tid}", None),
        ("GET", "http://x/threads?limit=10", None),
        ("GET", f"http://x/threads/{tid}/messages", None),
        ("POST", f"http://x/threads/{tid}/runs",
         {"agent": "demo", "input": {"prompt": "again"}, "multitask_strategy": "interrupt"}),
        ("GET", f"http://x/threads/{tid}/runs?limit=5", None),
        ("DELETE", f"http://x/threads/{tid}", None),
        ("POST", f"http://x/runs/{run.id}/resume", {"value": {"approved": True}, "waitpoint_id": "w1"}),
        ("POST", f"http://x/runs/{run.id}/resume", {"value": {"approved": True}, "waitpoint_id": "stale"}),
    ]  # fmt: skip
    keys = [headers.get("idempotency-key") for method, url, _, headers in server.requests if method == "POST"]
    assert all(keys[:2]) and not any(keys[2:])  # creates carry a key; a resume is not a create


async def test_async_resume_without_a_waitpoint_id_sends_only_the_value() -> None:
    server = ContractServer()
    http = httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(server))
    async with AsyncClient("http://x", "rq_k", http=http) as client:
        await client.runs.resume("r1", "yes")
    assert [(m, u, b) for m, u, b, _ in server.requests] == [("POST", "http://x/runs/r1/resume", {"value": "yes"})]
