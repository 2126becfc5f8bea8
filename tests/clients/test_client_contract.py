"""Requests the server does not answer yet (resume §9), held to the documented contract by an
in-memory transport that answers as the contract says and records what it got. Threads are
tested against a real runq (test_client_live.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from runq_client import AsyncClient, Client, RunqError

from tests.clients.test_client_unit import run_json


class ContractServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any, httpx.Headers]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, str(request.url.copy_with(scheme="http", host="x")), body, request.headers))
        if body.get("waitpoint_id") == "stale":
            return httpx.Response(409, json={"code": "not_waiting", "detail": "not the open waitpoint"})
        return httpx.Response(202, json=run_json())


def test_resume_follows_the_contract() -> None:
    server = ContractServer()
    client = Client("http://x", "rq_k", http=httpx.Client(base_url="http://x", transport=httpx.MockTransport(server)))
    assert client.runs.resume("r1", {"approved": True}, waitpoint_id="w1").status == "pending"
    with pytest.raises(RunqError) as stale:
        client.runs.resume("r1", {"approved": True}, waitpoint_id="stale")
    assert (stale.value.status, stale.value.code) == (409, "not_waiting")
    sent = [(method, url, body) for method, url, body, _ in server.requests]
    assert sent == [
        ("POST", "http://x/runs/r1/resume", {"value": {"approved": True}, "waitpoint_id": "w1"}),
        ("POST", "http://x/runs/r1/resume", {"value": {"approved": True}, "waitpoint_id": "stale"}),
    ]
    assert not any(headers.get("idempotency-key") for *_, headers in server.requests)  # a resume is not a create


async def test_async_resume_without_a_waitpoint_id_sends_only_the_value() -> None:
    server = ContractServer()
    http = httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(server))
    async with AsyncClient("http://x", "rq_k", http=http) as client:
        await client.runs.resume("r1", "yes")
    assert [(m, u, b) for m, u, b, _ in server.requests] == [("POST", "http://x/runs/r1/resume", {"value": "yes"})]
