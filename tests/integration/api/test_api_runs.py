"""Runs over HTTP: shapes, idempotency, pagination, cancel, event pages, stream tokens."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api import keys
from app.api.auth import Admin
from app.api.tokens import issue_token
from app.queue import Queue
from tests.api_support import RUN_FIELDS, SECRET, RunDriver, create_run, new_key, parse_sse


async def test_create_returns_the_run_itself(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    body = {
        "agent": "demo",
        "input": {"prompt": "hi", "steps": 2},
        "budget": {"max_turns": 3, "deadline_s": 60},
        "priority": 5,
        "max_attempts": 2,
        "delay_s": 0,
        "on_disconnect": "cancel",
        "disconnect_grace_s": 10,
    }
    response = await client.post("/runs", json=body, headers=alice)
    assert response.status_code == 201
    run = response.json()
    assert set(run) == RUN_FIELDS
    assert run["tenant_id"] == "alice"
    assert (run["status"], run["attempts"], run["last_event_seq"]) == ("pending", 0, 1)
    assert run["input"] == body["input"]
    assert run["budget"] == {"max_turns": 3, "deadline_s": 60.0}
    assert (run["priority"], run["max_attempts"], run["on_disconnect"]) == (5, 2, "cancel")
    assert run["disconnect_grace_s"] == 10

    fetched = await client.get(f"/runs/{run['id']}", headers=alice)
    assert fetched.status_code == 200
    assert fetched.json() == run


async def test_defaults(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(client, alice)
    assert (run["max_attempts"], run["priority"], run["budget"]) == (3, 0, {})
    assert (run["on_disconnect"], run["disconnect_grace_s"]) == ("continue", 30.0)


async def test_leased_run_hides_lease_fields(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice)
    await RunDriver(queue).start()
    shown = (await client.get(f"/runs/{run['id']}", headers=alice)).json()
    assert shown["status"] == "leased"
    assert "locked_by" not in shown and "locked_until" not in shown
    listed = (await client.get("/runs", headers=alice)).json()["items"][0]
    assert set(listed) == RUN_FIELDS


async def test_idempotency_key_same_body_same_run(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    body = {"agent": "demo", "input": {"prompt": "once"}}
    headers = alice | {"Idempotency-Key": "order-1"}
    first = await client.post("/runs", json=body, headers=headers)
    again = await client.post("/runs", json=body | {"priority": 0}, headers=headers)  # defaults are the same body
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]

    conflict = await client.post("/runs", json={"agent": "demo", "input": {"prompt": "twice"}}, headers=headers)
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "idempotency_conflict"


async def test_idempotency_key_is_per_tenant(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    body = {"agent": "demo", "input": {}}
    a = await client.post("/runs", json=body, headers=alice | {"Idempotency-Key": "k"})
    b = await client.post("/runs", json=body, headers=bob | {"Idempotency-Key": "k"})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


async def test_concurrent_identical_posts_create_one_run(
    client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine
) -> None:
    headers = alice | {"Idempotency-Key": "race"}
    body = {"agent": "demo", "input": {"prompt": "race"}}
    responses = await asyncio.gather(*(client.post("/runs", json=body, headers=headers) for _ in range(10)))
    assert sorted(r.status_code for r in responses) == [200] * 9 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM agent_runs"))).scalar() == 1


async def test_list_is_newest_first_with_keyset_cursor(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    created = [(await create_run(client, alice, input={"n": n}))["id"] for n in range(5)]
    await create_run(client, bob)
    seen: list[str] = []
    cursor = None
    for _ in range(3):
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/runs", params=params, headers=alice)).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert cursor is None
    assert seen == created[::-1]

    exact = (await client.get("/runs", params={"limit": 5}, headers=alice)).json()
    assert len(exact["items"]) == 5 and exact["next_cursor"] is None


async def test_list_filters_by_status(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    keep = await create_run(client, alice)
    gone = await create_run(client, alice)
    await client.post(f"/runs/{gone['id']}/cancel", headers=alice)
    cancelled = (await client.get("/runs", params={"status": "cancelled"}, headers=alice)).json()
    pending = (await client.get("/runs", params={"status": "pending"}, headers=alice)).json()
    assert [r["id"] for r in cancelled["items"]] == [gone["id"]]
    assert [r["id"] for r in pending["items"]] == [keep["id"]]


async def test_cancel_pending_run_at_once(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(client, alice)
    response = await client.post(f"/runs/{run['id']}/cancel", json={"note": "changed my mind"}, headers=alice)
    assert response.status_code == 202
    cancelled = response.json()
    assert (cancelled["status"], cancelled["cancel_reason"]) == ("cancelled", "user")
    page = (await client.get(f"/runs/{run['id']}/events", headers=alice | {"Accept": "application/json"})).json()
    assert [(e["type"], e["data"]) for e in page["items"][1:]] == [
        ("run.cancel_requested", {"reason": "user", "note": "changed my mind"}),
        ("run.cancelled", {"reason": "user"}),
    ]

    again = await client.post(f"/runs/{run['id']}/cancel", headers=alice)
    assert again.status_code == 409
    assert again.json()["code"] == "run_finished"


async def test_cancel_note_is_stored_redacted(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(client, alice)
    note = "stop, I pasted my key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 by mistake"
    await client.post(f"/runs/{run['id']}/cancel", json={"note": note}, headers=alice)
    page = (await client.get(f"/runs/{run['id']}/events", headers=alice | {"Accept": "application/json"})).json()
    stored = page["items"][1]["data"]["note"]
    assert "abcdefghijklmnop" not in stored and stored.startswith("stop, I pasted my key")


async def test_cancel_leased_run_requests_it(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice)
    await RunDriver(queue).start()
    first = await client.post(f"/runs/{run['id']}/cancel", headers=alice)
    repeat = await client.post(f"/runs/{run['id']}/cancel", headers=alice)
    assert (first.status_code, repeat.status_code) == (202, 202)
    assert first.json()["status"] == "leased"
    assert first.json()["cancel_requested_at"] is not None
    assert repeat.json()["last_event_seq"] == first.json()["last_event_seq"]  # asked once


async def test_event_page_after_and_limit(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice)
    driver = RunDriver(queue)
    await driver.start()
    await driver.deltas("a", "b", "c")
    json_headers = alice | {"Accept": "application/json"}
    page = (await client.get(f"/runs/{run['id']}/events", headers=json_headers)).json()
    assert [e["seq"] for e in page["items"]] == [1, 2, 3, 4, 5]
    assert set(page["items"][1]) == {"seq", "type", "data", "attempt", "created_at"}
    assert (page["items"][1]["type"], page["items"][1]["attempt"]) == ("run.started", 1)

    part = await client.get(f"/runs/{run['id']}/events", params={"after": 2, "limit": 2}, headers=json_headers)
    assert [(e["seq"], e["data"]) for e in part.json()["items"]] == [(3, {"text": "a"}), (4, {"text": "b"})]
    assert part.json()["next_after"] == 4  # a full page with more stored after it
    resumed = await client.get(f"/runs/{run['id']}/events", headers=json_headers | {"Last-Event-ID": "4"})
    assert [e["seq"] for e in resumed.json()["items"]] == [5]
    assert page["next_after"] is None and resumed.json()["next_after"] is None
    exact = await client.get(f"/runs/{run['id']}/events", params={"after": 3, "limit": 2}, headers=json_headers)
    assert [e["seq"] for e in exact.json()["items"]] == [4, 5] and exact.json()["next_after"] is None


async def test_event_pages_follow_next_after_to_the_end(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    """129 events read 100 at a time: nothing is cut off, and the last page says it is last."""
    run = await create_run(client, alice)
    driver = RunDriver(queue)
    await driver.start()
    last = await driver.deltas(*(f"d{i}" for i in range(127)))  # + run.queued, run.started
    assert last == 129
    seqs: list[int] = []
    after: int | None = 0
    while after is not None:
        page = (await client.get(
            f"/runs/{run['id']}/events", params={"after": after}, headers=alice | {"Accept": "application/json"}
        )).json()
        seqs += [e["seq"] for e in page["items"]]
        after = page["next_after"]
    assert seqs == list(range(1, 130))


async def test_stream_of_finished_run_replays_and_closes(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice)
    driver = RunDriver(queue)
    await driver.start()
    await driver.deltas("x", "y")
    last = await driver.complete({"text": "xy"})

    response = await client.get(f"/runs/{run['id']}/events", headers=alice)  # buffered: it must end
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-accel-buffering"] == "no"
    frames = parse_sse(response.text)
    assert [f.id for f in frames] == list(range(1, last + 1))
    assert [f.event for f in frames] == [
        "run.queued", "run.started", "message.delta", "message.delta", "run.completed",
    ]  # fmt: skip
    assert frames[-1].data == {"output": {"text": "xy"}}

    tail = await client.get(f"/runs/{run['id']}/events", headers=alice | {"Last-Event-ID": "3"})
    assert [f.id for f in parse_sse(tail.text)] == [4, 5]
    header_wins = await client.get(
        f"/runs/{run['id']}/events", params={"after": 0}, headers=alice | {"Last-Event-ID": str(last)}
    )
    assert parse_sse(header_wins.text) == []


async def test_stream_token_reads_that_run_only(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice)
    other = await create_run(client, alice)
    await client.post(f"/runs/{run['id']}/cancel", headers=alice)  # finished: the stream ends

    issued = await client.post(f"/runs/{run['id']}/stream-token", headers=alice)
    assert issued.status_code == 200
    token = issued.json()["token"]
    assert issued.json()["expires_at"]

    stream = await client.get(f"/runs/{run['id']}/events", params={"token": token})
    assert stream.status_code == 200
    assert [f.event for f in parse_sse(stream.text)][-1] == "run.cancelled"

    for response in (
        await client.get(f"/runs/{other['id']}/events", params={"token": token}),
        await client.get(f"/runs/{run['id']}", params={"token": token}),
        await client.get(f"/runs/{run['id']}/events", params={"token": token + "x"}),
    ):
        assert response.status_code == 401, response.text
        assert response.json()["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")

    expired, _ = issue_token(SECRET, run_id=uuid.UUID(run["id"]), tenant_id="alice", ttl_s=1, now=time.time() - 10)
    assert (await client.get(f"/runs/{run['id']}/events", params={"token": expired})).status_code == 401
    forged, _ = issue_token("another-secret", run_id=uuid.UUID(run["id"]), tenant_id="alice", ttl_s=60)
    assert (await client.get(f"/runs/{run['id']}/events", params={"token": forged})).status_code == 401


async def test_health_ready_and_metrics_need_no_key(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    await create_run(client, alice)
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ok"}
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert "runq_runs_created_total" in metrics.text
    assert "alice" not in metrics.text


async def test_openapi_lists_problem_responses(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    create = doc["paths"]["/runs"]["post"]["responses"]
    assert {"201", "200", "401", "409", "413", "422", "503"} <= set(create)
    assert "application/problem+json" in create["409"]["content"]
    assert "text/event-stream" in doc["paths"]["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]


async def test_require_admin(app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine, alice: dict[str, str]) -> None:
    @app.get("/admin/whoami")
    async def whoami(principal: Admin) -> dict[str, str]:
        return {"tenant": principal.tenant_id}

    admin = await new_key(engine, "ops", admin=True)
    assert (await client.get("/admin/whoami", headers=admin)).json() == {"tenant": "ops"}
    refused = await client.get("/admin/whoami", headers=alice)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert (await client.get("/admin/whoami")).status_code == 401


@pytest.mark.parametrize("path", ["/runs/{id}", "/runs/{id}/events"])
async def test_revoked_key_is_refused(
    client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, path: str
) -> None:
    run = await create_run(client, alice)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE api_keys SET revoked_at = now()"))
    # Known keys are remembered for KNOWN_KEY_TTL_S: let that time pass for the cache.
    for digest, (_, principal) in list(keys._known.items()):
        keys._known[digest] = (0.0, principal)
    response = await client.get(path.format(id=run["id"]), headers=alice | {"Accept": "application/json"})
    assert (response.status_code, response.json()["code"]) == (401, "unauthorized")
