"""Isolation and auth as properties over every route the app has (issue 9).

The routes are read from the app's OpenAPI document, so a new endpoint is covered the day it is added; one with a
path parameter this file does not know fails until the test is taught how to fill it. For each
route: no key or an unknown key is 401; a tenant key on an admin route is 403; tenant B's key on
tenant A's run is 404; and no answer to B (or to nobody, on the public routes) ever carries A's
data. Stream tokens open one run's events only: expired, forged or tampered tokens are 401.
"""

from __future__ import annotations

import base64
import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.tokens import issue_token
from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET, new_key

MARK = "alice-private-7f3c"  # in A's run input: must never reach anyone but A
PUBLIC = {"/healthz", "/readyz", "/metrics"}
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/runs"): {"agent": "demo", "input": {"prompt": "bob's own"}},
    ("PUT", "/admin/tenants/{tenant}"): {"max_inflight": 1},
    ("PUT", "/admin/tenants/{tenant}/limits"): {"max_pending": 5},
    ("POST", "/schedules"): {"agent": "demo", "every_s": 60, "input": {"prompt": "bob's own"}},
    ("PATCH", "/schedules/{schedule_id}"): {"paused": True},
    ("POST", "/runs/{run_id}/resume"): {"value": {"approved": True}},
    ("POST", "/threads"): {"metadata": {"who": "bob"}},
    ("POST", "/threads/{thread_id}/runs"): {"agent": "demo", "input": {"prompt": "bob's own"}},
    # A's thread id as the chat id (to B, a chat of B's own), and no message: a message would
    # stream B's run until a worker ran it (tests/integration/api/test_api_ai_sdk.py has those).
    ("POST", "/ai-sdk/chat"): {"id": "{thread_id}", "messages": []},
    # B names A's thread and answers an interrupt: for B that id names a chat thread of B's own,
    # which waits for nothing (a request that started a run would stream until it ended).
    ("POST", "/ag-ui/{agent}"): {
        "threadId": "{thread_id}", "runId": "bob-run", "messages": [],
        "resume": [{"interruptId": str(uuid.UUID(int=0)), "status": "resolved", "payload": True}],
    },
    # A's item is in ("notes",) under "k": to B those name B's own (none), never A's.
    ("PUT", "/langgraph/store/items"): {"namespace": ["notes"], "key": "b", "value": {"who": "bob"}},
    ("DELETE", "/langgraph/store/items"): {"namespace": ["notes"], "key": "k"},
    ("POST", "/langgraph/store/items/search"): {"namespace_prefix": ["notes"]},
    ("POST", "/langgraph/store/namespaces"): {},
    ("POST", "/langgraph/assistants"): {"graph_id": "no-graph"},
    ("POST", "/langgraph/assistants/{assistant_id}/latest"): {"version": 1},
    ("POST", "/langgraph/runs/crons"): {"assistant_id": "no-graph", "schedule": "0 9 * * *"},
    ("POST", "/langgraph/threads/{thread_id}/runs/crons"): {"assistant_id": "no-graph", "schedule": "0 9 * * *"},
    ("PATCH", "/langgraph/runs/crons/{cron_id}"): {"enabled": False},
    ("POST", "/langgraph/runs/crons/search"): {},
    ("POST", "/langgraph/runs/crons/count"): {},
    # LangGraph's API (§17): this app serves no graph, so a run names an assistant that is none
    # (tests/langgraph_server runs real graphs); B's thread-less runs are refused for that.
    ("POST", "/langgraph/threads/{thread_id}/state"): {"values": {"who": "bob"}},
    ("POST", "/langgraph/runs/batch"): [],
    ("POST", "/langgraph/runs/cancel"): {"status": "all"},  # B's graph runs: none
    **{
        ("POST", path): {"assistant_id": "no-graph", "input": {"prompt": "bob's own"}}
        for path in ("/langgraph/runs", "/langgraph/runs/stream", "/langgraph/runs/wait", "/langgraph/threads/{thread_id}/runs",
                     "/langgraph/threads/{thread_id}/runs/stream", "/langgraph/threads/{thread_id}/runs/wait")
    },
}
QUERIES = {("GET", "/langgraph/store/items"): {"namespace": "notes", "key": "k"}}
# A chat id names a chat of the caller's own tenant (none yet: empty, 204), never A's.
REFUSED = {("POST", "/ai-sdk/chat"): 422}
ANSWERS_TO_B = {
    ("POST", "/ag-ui/{agent}"): (409, "not_waiting"),
    **{("POST", f"/langgraph/runs{tail}"): (422, "unknown_assistant") for tail in ("", "/stream", "/wait", "/crons")},
    **{
        (method, path): (404, "not_found")
        for method, path in (("GET", "/langgraph/assistants/{assistant_id}"),
                             ("GET", "/langgraph/assistants/{assistant_id}/graph"),
                             ("GET", "/langgraph/assistants/{assistant_id}/schemas"),
                             ("GET", "/langgraph/assistants/{assistant_id}/subgraphs"),
                             ("PATCH", "/langgraph/assistants/{assistant_id}"),
                             ("DELETE", "/langgraph/assistants/{assistant_id}"),
                             ("POST", "/langgraph/assistants/{assistant_id}/versions"),
                             ("POST", "/langgraph/assistants/{assistant_id}/latest"))
    },
    ("POST", "/langgraph/assistants"): (404, "unknown_graph"),  # this app serves no graph
}
# LangGraph's routes of a thread's run: A's run here is in no thread, so A's own control is a 404;
# and A's thread-less run, being A's, would stream to its end.
NOT_THE_THREADS_RUN = {
    ("GET", f"/langgraph/threads/{{thread_id}}/runs/{{run_id}}{tail}") for tail in ("", "/join", "/stream")
} | {("GET", "/langgraph/runs/{run_id}/stream")}
# Streams that follow A's pending run until it ends: no control request with A's key here
# (tests/integration/api/test_api_ag_ui.py reads them to the end).
ENDLESS = {("GET", "/ag-ui/runs/{run_id}/events")}
NO_SUCH = str(uuid.UUID(int=0))
TENANT_OBJECTS = ("{run_id}", "{schedule_id}", "{thread_id}", "{cron_id}")  # another tenant's is 404
JSON = {"Accept": "application/json"}


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2), sse_ping_s=0.2)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://runq.test", timeout=10) as client:
        yield client


def endpoints(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) of the app's OpenAPI document: each route it serves, as
    routers are included, except the static UI files (``include_in_schema=False``)."""
    found = [(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item]
    assert len(found) > 10, found
    return sorted(found)


def fill(path: str, run_id: str, schedule_id: str = NO_SUCH, thread_id: str = NO_SUCH) -> str:
    """The path with its parameters filled in; an unknown parameter fails the test on purpose."""
    known = {
        "run_id": run_id, "tenant": "alice", "schedule_id": schedule_id, "delivery_id": NO_SUCH, "thread_id": thread_id,
        "chat_id": thread_id, "cron_id": schedule_id,
        "agent": "demo", "assistant_id": "no-graph", "checkpoint_id": NO_SUCH,
    }  # fmt: skip
    for name in [part[1:-1] for part in path.split("/") if part.startswith("{")]:
        assert name in known, f"{path}: teach test_isolation how to fill {{{name}}}"
        path = path.replace(f"{{{name}}}", known[name])
    return path


async def call(
    client: httpx.AsyncClient, method: str, path: str, run_id: str, headers: dict[str, str], schedule_id: str = NO_SUCH,
    thread_id: str = NO_SUCH,
) -> httpx.Response:
    default = {} if path.startswith("/langgraph/") else None  # LangGraph's SDKs always send a body
    body = json.loads(json.dumps(BODIES.get((method, path), default)).replace("{thread_id}", thread_id))
    return await client.request(
        method, fill(path, run_id, schedule_id, thread_id), headers=JSON | headers,
        json=body if method in ("POST", "PUT", "PATCH", "DELETE") and body is not None else None,
        params=QUERIES.get((method, path)),
    )  # fmt: skip


def shown(response: httpx.Response) -> str:
    """The body, less a problem's ``instance`` (the caller's own request path, echoed back)."""
    if not response.content:
        return ""  # 204
    body = response.json()
    if isinstance(body, dict) and "instance" in body:
        body = {k: v for k, v in body.items() if k != "instance"}
    return json.dumps(body)


async def test_every_route_keeps_tenants_apart(app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    alice, bob = await new_key(engine, "alice"), await new_key(engine, "bob")
    created = await client.post("/runs", json={"agent": "demo", "input": {"prompt": MARK}}, headers=alice)
    run_id = created.json()["id"]
    schedule = await client.post("/schedules", json={"agent": "demo", "every_s": 60, "input": {"prompt": MARK}}, headers=alice)
    schedule_id = schedule.json()["id"]
    thread_id = (await client.post("/threads", json={"metadata": {"mark": MARK}}, headers=alice)).json()["id"]
    item = {"namespace": ["notes"], "key": "k", "value": {"mark": MARK}}
    assert (await client.put("/langgraph/store/items", json=item, headers=alice)).status_code == 204
    routes = endpoints(app)
    assert ("GET", "/runs/{run_id}") in routes and ("POST", "/admin/runs/{run_id}/requeue") in routes

    for method, path in routes:
        where = f"{method} {path}"
        if path in PUBLIC:
            response = await call(client, method, path, run_id, {})
            assert response.status_code < 500, where
            assert MARK not in response.text and run_id not in response.text, f"{where} shows A's run"
            continue
        for headers in ({}, {"Authorization": "Bearer rq_unknown"}, {"Authorization": "Basic YTpi"}):
            response = await call(client, method, path, run_id, headers, schedule_id, thread_id)
            assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), where
        response = await call(client, method, path, run_id, bob, schedule_id, thread_id)
        if path.startswith("/admin"):
            assert (response.status_code, response.json()["code"]) == (403, "forbidden"), where
        elif (method, path) in REFUSED:
            assert response.status_code == REFUSED[method, path], where
        elif (method, path) in ANSWERS_TO_B:
            assert (response.status_code, response.json()["code"]) == ANSWERS_TO_B[(method, path)], where
        elif any(name in path for name in TENANT_OBJECTS):
            assert (response.status_code, response.json()["code"]) == (404, "not_found"), where
        else:
            assert response.status_code < 400, f"{where}: {response.status_code} {response.text}"
        assert MARK not in shown(response) and "alice" not in shown(response), f"{where} shows A's data to B"
        if response.status_code < 400:
            assert run_id not in shown(response), f"{where} shows A's run id to B"
            assert schedule_id not in shown(response), f"{where} shows A's schedule id to B"
            assert thread_id not in shown(response), f"{where} shows A's thread id to B"
        if (
            method == "GET" and any(name in path for name in TENANT_OBJECTS) and not path.startswith("/admin")
            and (method, path) not in ENDLESS | NOT_THE_THREADS_RUN
        ):
            mine = await call(client, method, path, run_id, alice, schedule_id, thread_id)
            assert mine.status_code == 200, f"{where}: the control with A's own key failed"

    after = await client.get(f"/runs/{run_id}", headers=alice)
    assert after.json()["status"] == "pending" and after.json()["cancel_requested_at"] is None
    assert (await client.get(f"/schedules/{schedule_id}", headers=alice)).json()["paused"] is False
    thread = (await client.get(f"/threads/{thread_id}", headers=alice)).json()
    assert (thread["status"], thread["last_run_id"]) == ("idle", None)
    kept = await client.get("/langgraph/store/items", params={"namespace": "notes", "key": "k"}, headers=alice)
    assert kept.json()["value"] == {"mark": MARK}


def _tampered(token: str, rng: random.Random) -> str:
    """One random change: a flipped character, a cut, an extra character, swapped halves."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    i = rng.randrange(len(token))
    return rng.choice(
        [
            token[:i] + rng.choice(alphabet.replace(token[i], "")) + token[i + 1 :],
            token[:i],
            token[:i] + rng.choice(alphabet) + token[i:],
            ".".join(reversed(token.split("."))),
        ]
    )


def _payload(run_id: str, tenant: str, expires: float) -> str:
    raw = json.dumps({"r": run_id, "t": tenant, "e": expires}).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def test_stream_tokens_open_one_run_only(app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    alice, bob = await new_key(engine, "alice"), await new_key(engine, "bob")
    run_id = (await client.post("/runs", json={"agent": "demo", "input": {"prompt": MARK}}, headers=alice)).json()["id"]
    bobs = (await client.post("/runs", json={"agent": "demo"}, headers=bob)).json()["id"]
    token = (await client.post(f"/runs/{run_id}/stream-token", headers=alice)).json()["token"]
    events = f"/runs/{run_id}/events"

    def refused(response: httpx.Response) -> bool:
        return response.status_code == 401 and response.json()["code"] == "unauthorized" and MARK not in response.text

    assert (await client.get(events, params={"token": token}, headers=JSON)).status_code == 200
    # Only that run's events: every other route and every other run refuse it.
    for method, path in endpoints(app):
        if path in PUBLIC or (method, path) == ("GET", "/runs/{run_id}/events"):
            continue
        if (method, path) in ENDLESS:  # the same run's events as AG-UI: accepted, and endless here
            continue
        response = await client.request(method, fill(path, run_id), params={"token": token}, headers=JSON)
        if (method, path) == ("POST", "/runs/{run_id}/resume"):  # that run, but a read-only token
            assert (response.status_code, response.json()["code"]) == (403, "insufficient_scope")
            continue
        assert refused(response), f"{method} {path}: {response.status_code}"
    assert refused(await client.get(f"/runs/{bobs}/events", params={"token": token}, headers=JSON))

    expired, _ = issue_token(SECRET, run_id=uuid.UUID(run_id), tenant_id="alice", ttl_s=1, now=time.time() - 2)
    forged, _ = issue_token("not-the-secret-" * 3, run_id=uuid.UUID(run_id), tenant_id="alice", ttl_s=60)
    signature = token.split(".")[1]
    extended = f"{_payload(run_id, 'alice', time.time() + 3600)}.{signature}"  # a new expiry, the old signature
    retargeted = f"{_payload(bobs, 'alice', time.time() + 60)}.{signature}"
    response = await client.get(events, params={"token": expired}, headers=JSON)
    assert (response.status_code, response.json()["code"]) == (401, "token_expired")
    for bad in (forged, extended, retargeted, "", ".", token.split(".")[0], "x" * 500):
        assert refused(await client.get(events, params={"token": bad}, headers=JSON)), bad

    rng = random.Random(4)
    for _ in range(200):
        bad = _tampered(token, rng)
        if bad != token:
            assert refused(await client.get(events, params={"token": bad}, headers=JSON)), bad

    # Even a correctly signed token (only the server can make one) naming another tenant gets
    # nothing: the run is looked up under the token's tenant.
    crossed, _ = issue_token(SECRET, run_id=uuid.UUID(run_id), tenant_id="bob", ttl_s=60)
    response = await client.get(events, params={"token": crossed}, headers=JSON)
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert MARK not in response.text


# What a thread token opens (docs/threads.md, "Browser tokens"): its thread and its thread's runs.
THREAD_TOKEN_ROUTES = {
    ("GET", "/threads/{thread_id}"),
    ("GET", "/threads/{thread_id}/messages"),
    ("GET", "/threads/{thread_id}/runs"),
    ("POST", "/threads/{thread_id}/runs"),
    ("GET", "/runs/{run_id}/events"),
    ("POST", "/runs/{run_id}/cancel"),
    ("POST", "/runs/{run_id}/resume"),
    # the AI SDK's chat: the chat id (a thread id here) in the path or the body
    ("POST", "/ai-sdk/chat"),
    ("GET", "/ai-sdk/chat/{chat_id}/messages"),
    ("GET", "/ai-sdk/chat/{chat_id}/stream"),
    # AG-UI: the thread in the body (its own: an interrupt answered that is not open), the run's events
    ("POST", "/ag-ui/{agent}"),
    ("GET", "/ag-ui/runs/{run_id}/events"),
    # LangGraph's API: the thread, its state and runs (key-only: delete, copy, search, count)
    ("GET", "/langgraph/threads/{thread_id}"),
    ("PATCH", "/langgraph/threads/{thread_id}"),
    ("GET", "/langgraph/threads/{thread_id}/state"),
    ("POST", "/langgraph/threads/{thread_id}/state"),
    ("GET", "/langgraph/threads/{thread_id}/state/{checkpoint_id}"),
    ("GET", "/langgraph/threads/{thread_id}/history"),
    ("POST", "/langgraph/threads/{thread_id}/history"),
    ("GET", "/langgraph/threads/{thread_id}/runs"),
    ("POST", "/langgraph/threads/{thread_id}/runs"),
    ("POST", "/langgraph/threads/{thread_id}/runs/stream"),
    ("POST", "/langgraph/threads/{thread_id}/runs/wait"),
    ("GET", "/langgraph/threads/{thread_id}/runs/{run_id}"),
    ("GET", "/langgraph/threads/{thread_id}/runs/{run_id}/join"),
    ("GET", "/langgraph/threads/{thread_id}/runs/{run_id}/stream"),
    ("POST", "/langgraph/threads/{thread_id}/runs/{run_id}/cancel"),
}
# On its own thread these would follow the pending run to its end (test_api_ai_sdk.py has them);
# LangGraph's run creates and state update need a graph, which this app does not serve
# (tests/langgraph_server/ drives them, and cancel, with a thread token).
NOT_ON_OWN_THREAD = {
    ("GET", "/ai-sdk/chat/{chat_id}/stream"), *ENDLESS,
    ("GET", "/langgraph/threads/{thread_id}/runs/{run_id}/join"),
    ("GET", "/langgraph/threads/{thread_id}/runs/{run_id}/stream"),
    ("POST", "/langgraph/threads/{thread_id}/state"),
    ("POST", "/langgraph/threads/{thread_id}/runs"),
    ("POST", "/langgraph/threads/{thread_id}/runs/stream"),
    ("POST", "/langgraph/threads/{thread_id}/runs/wait"),
    ("POST", "/langgraph/threads/{thread_id}/runs/{run_id}/cancel"),  # would end the run the others are tried on
}  # fmt: skip


async def test_thread_tokens_open_their_thread_and_its_runs_only(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    alice, bob = await new_key(engine, "alice"), await new_key(engine, "bob")
    mine, other = [(await client.post("/threads", headers=alice)).json()["id"] for _ in range(2)]
    bobs = (await client.post("/threads", headers=bob)).json()["id"]
    body = {"agent": "demo", "input": {"prompt": MARK}}
    run_in = {t: (await client.post(f"/threads/{t}/runs", json=body, headers=k)).json()["id"] for t, k in
              ((mine, alice), (other, alice), (bobs, bob))}  # fmt: skip
    loose = (await client.post("/runs", json=body, headers=alice)).json()["id"]  # a run in no thread
    token = (await client.post(f"/threads/{mine}/token", headers=alice)).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}

    for method, path in endpoints(app):
        where = f"{method} {path}"
        if path in PUBLIC:
            continue
        if (method, path) in THREAD_TOKEN_ROUTES:
            if (method, path) not in NOT_ON_OWN_THREAD:
                response = await call(client, method, path, run_in[mine], auth, thread_id=mine)
                assert response.status_code < 400 or response.json()["code"] in ("not_waiting", "no_user_message"), (
                    f"{where}: {response.text}"
                )
            # another thread of the same tenant, another tenant's thread, a run in no thread
            for thread_id, run_id in ((other, run_in[other]), (bobs, run_in[bobs]), (NO_SUCH, loose)):
                response = await call(client, method, path, run_id, auth, thread_id=thread_id)
                assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), where
                assert MARK not in response.text, where
            continue
        response = await call(client, method, path, run_in[mine], auth, thread_id=mine)
        assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), where
        # in the query string as well as in the header
        response = await client.request(method, fill(path, run_in[mine], thread_id=mine), params={"token": token})
        assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), where

    for thread_id, run_id in ((other, run_in[other]), (bobs, run_in[bobs])):  # nothing changed there
        headers = alice if thread_id == other else bob
        assert (await client.get(f"/runs/{run_id}", headers=headers)).json()["cancel_requested_at"] is None
        assert (await client.get(f"/threads/{thread_id}/runs", headers=headers)).json()["items"][0]["id"] == run_id
