"""A ``/langgraph`` run's ``webhook`` is runq's §10 webhook: delivered signed from the outbox when
the run ends (here cancelled through LangGraph's cancel route), refused at create for a private
host, and not a field a thread token may set."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from app.api.webhooks import UrlGuard
from app.settings import Settings
from tests.api_support import SECRET
from tests.integration.api.test_api_webhooks import (
    app as app,  # the fixtures, on this module's settings
)
from tests.integration.api.test_api_webhooks import guard as guard
from tests.integration.api.test_api_webhooks import sending, settled
from tests.langgraph_server.conftest import CONFIG
from tests.webhook_support import Receiver, verify_signature


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url, secret_key=SECRET, poll_s=0.2, retry_base_s=0.05, retry_max_s=0.2,
        webhook_timeout_s=1.0, webhook_allow_hosts=["127.0.0.1"], langgraph_config=CONFIG,
    )  # fmt: skip


async def new_thread(client: httpx.AsyncClient, key: dict[str, str]) -> str:
    response = await client.post("/langgraph/threads", json={}, headers=key)
    assert response.status_code == 200, response.text
    thread_id: str = response.json()["thread_id"]
    return thread_id


async def test_a_runs_webhook_is_delivered_signed_when_it_ends(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], settings: Settings, guard: UrlGuard
) -> None:
    secret = (await client.get("/webhook-secret", headers=alice)).json()["secret"]
    thread_id = await new_thread(client, alice)
    async with Receiver() as receiver, sending(app, settings, guard):
        body = {"assistant_id": "counter", "input": {"count": 1}, "webhook": receiver.url}
        run = (await client.post(f"/langgraph/threads/{thread_id}/runs", json=body, headers=alice)).json()
        cancel = await client.post(f"/langgraph/threads/{thread_id}/runs/{run['run_id']}/cancel", headers=alice)
        assert cancel.status_code in (200, 202, 204), cancel.text
        await settled(client, alice, run["run_id"], "delivered")
    (request,) = receiver.requests
    assert verify_signature(secret, request.headers, request.body)
    assert request.json["type"] == "run.cancelled" and request.json["run"]["id"] == run["run_id"]


async def test_a_private_host_is_refused_at_create(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread_id = await new_thread(client, alice)
    body = {"assistant_id": "counter", "webhook": "http://10.1.2.3/hook"}
    response = await client.post(f"/langgraph/threads/{thread_id}/runs", json=body, headers=alice)
    assert (response.status_code, response.json()["code"]) == (422, "webhook_url_forbidden")


async def test_a_thread_token_may_not_set_one(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread_id = await new_thread(client, alice)
    token = (await client.post(f"/threads/{thread_id}/token", json={}, headers=alice)).json()["token"]
    body = {"assistant_id": "counter", "webhook": "http://127.0.0.1:9/hook"}
    response = await client.post(f"/langgraph/threads/{thread_id}/runs", json=body, headers={"x-api-key": token})
    assert (response.status_code, response.json()["code"]) == (403, "field_not_allowed")
    plain = await client.post(f"/langgraph/threads/{thread_id}/runs", json={"assistant_id": "counter"},
                              headers={"x-api-key": token})  # fmt: skip
    assert plain.status_code == 200, plain.text  # and without one, the token's run is made
