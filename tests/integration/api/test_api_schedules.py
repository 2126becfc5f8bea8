"""Schedule routes: create, read, list, pause/resume, delete; bad timing with its codes; another
tenant's schedule is 404 everywhere; a parked schedule's error; the tenant's max_schedules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from app.queue.refusals import Refusals
from tests.api_support import new_key

SCHEDULE_FIELDS = {"id", "tenant_id", "cron", "every_s", "timezone", "next_run_at", "paused", "last_run_id", "created_at"}


async def create(client: httpx.AsyncClient, key: dict[str, str], **body: object) -> dict[str, object]:
    response = await client.post("/schedules", json={"agent": "demo", "every_s": 60} | body, headers=key)
    assert response.status_code == 201, response.text
    result: dict[str, object] = response.json()
    return result


async def test_create_read_list_pause_resume_delete(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    schedule = await create(client, alice, cron="0 9 * * MON-FRI", every_s=None, timezone="Europe/Berlin",
                            input={"prompt": "report"}, budget={"max_turns": 3}, priority=5)  # fmt: skip
    assert set(schedule) >= SCHEDULE_FIELDS
    assert (schedule["tenant_id"], schedule["paused"], schedule["last_run_id"]) == ("alice", False, None)
    next_run = datetime.fromisoformat(str(schedule["next_run_at"]))
    assert next_run > datetime.now(UTC) and next_run.astimezone(UTC).hour in (7, 8)  # 09:00 in Berlin
    sid = schedule["id"]
    assert (await client.get(f"/schedules/{sid}", headers=alice)).json() == schedule
    listed = (await client.get("/schedules", headers=alice)).json()
    assert [s["id"] for s in listed["items"]] == [sid] and listed["next_cursor"] is None

    paused = (await client.patch(f"/schedules/{sid}", json={"paused": True}, headers=alice)).json()
    assert paused["paused"] is True
    resumed = (await client.patch(f"/schedules/{sid}", json={"paused": False}, headers=alice)).json()
    assert resumed["paused"] is False and resumed["next_run_at"] == schedule["next_run_at"]

    assert (await client.delete(f"/schedules/{sid}", headers=alice)).status_code == 204
    assert (await client.get(f"/schedules/{sid}", headers=alice)).status_code == 404
    assert (await client.delete(f"/schedules/{sid}", headers=alice)).status_code == 404


async def test_interval_schedule_is_first_due_one_interval_from_now(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    before = datetime.now(UTC)
    schedule = await create(client, alice, every_s=3600)
    due = datetime.fromisoformat(str(schedule["next_run_at"]))
    assert before + timedelta(seconds=3590) < due < datetime.now(UTC) + timedelta(seconds=3610)
    assert (schedule["cron"], schedule["every_s"], schedule["timezone"]) == (None, 3600.0, "UTC")


async def test_pages_of_schedules(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    ids = [(await create(client, alice))["id"] for _ in range(3)]
    first = (await client.get("/schedules", params={"limit": 2}, headers=alice)).json()
    second = (await client.get("/schedules", params={"limit": 2, "cursor": first["next_cursor"]}, headers=alice)).json()
    assert [s["id"] for s in first["items"] + second["items"]] == ids[::-1]
    assert second["next_cursor"] is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cron": "61 * * * *"}, "invalid_cron"),
        ({"cron": "* * * *"}, "invalid_cron"),
        ({"cron": "@hourly"}, "invalid_cron"),
        ({"cron": "0 0 30 2 *"}, "invalid_cron"),
        ({"every_s": 0.5}, "invalid_interval"),
        ({"every_s": -1}, "invalid_interval"),
        ({"cron": "* * * * *", "every_s": 60}, "invalid_schedule"),
        ({}, "invalid_schedule"),
        ({"every_s": 60, "timezone": "Mars/Olympus"}, "unknown_timezone"),
        ({"every_s": 60, "timezone": "/etc/localtime"}, "unknown_timezone"),
        ({"every_s": 60, "agent": "nope"}, "unknown_agent"),
        ({"every_s": 60, "thread_id": "not-a-thread"}, "invalid_id"),
        ({"every_s": "60"}, "validation_error"),
        ({"every_s": 60, "input": {"bad": "nul \x00"}}, "validation_error"),
        ({"every_s": 60, "extra": 1}, "validation_error"),
    ],
)
async def test_bad_schedules_are_422_with_a_code(
    client: httpx.AsyncClient, alice: dict[str, str], body: dict[str, object], code: str
) -> None:
    response = await client.post("/schedules", json={"agent": "demo"} | body, headers=alice)
    assert (response.status_code, response.json()["code"]) == (422, code), response.text
    assert response.headers["content-type"] == "application/problem+json"


async def test_bad_patch_and_ids(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    sid = (await create(client, alice))["id"]
    for body in ({"paused": "yes"}, {}, {"paused": True, "cron": "* * * * *"}):
        response = await client.patch(f"/schedules/{sid}", json=body, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, "validation_error")
    response = await client.get("/schedules/not-a-uuid", headers=alice)
    assert (response.status_code, response.json()["code"]) == (422, "invalid_id")


async def test_another_tenants_schedule_is_404_everywhere(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    sid = (await create(client, alice))["id"]
    for method, body in (("GET", None), ("PATCH", {"paused": True}), ("DELETE", None)):
        response = await client.request(method, f"/schedules/{sid}", json=body, headers=bob)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), method
    assert (await client.get("/schedules", headers=bob)).json()["items"] == []
    assert (await client.get(f"/schedules/{sid}", headers=alice)).json()["paused"] is False  # untouched
    assert (await client.get("/schedules")).status_code == 401


async def test_admins_list_every_tenants_schedules(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str], engine: AsyncEngine
) -> None:
    ops = await new_key(engine, "ops", admin=True)
    mine, theirs = (await create(client, alice))["id"], (await create(client, bob))["id"]
    listed = (await client.get("/admin/schedules", headers=ops)).json()["items"]
    assert [s["id"] for s in listed] == [theirs, mine]
    only = (await client.get("/admin/schedules", params={"tenant": "alice"}, headers=ops)).json()["items"]
    assert [s["id"] for s in only] == [mine]
    assert (await client.get("/admin/schedules", headers=alice)).status_code == 403


async def test_a_schedule_names_one_of_the_tenants_threads(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    thread_id = (await client.post("/threads", headers=alice)).json()["id"]
    body = {"agent": "demo", "every_s": 60, "thread_id": thread_id}
    created = await client.post("/schedules", json=body, headers=alice)
    assert created.status_code == 201 and created.json()["thread_id"] == thread_id
    for headers, thread in ((bob, thread_id), (alice, "0b7c5a1e-0000-4000-8000-000000000000")):
        response = await client.post("/schedules", json=body | {"thread_id": thread}, headers=headers)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), response.text


async def test_a_parked_schedule_shows_why_to_its_tenant_only(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str], engine: AsyncEngine, queue: Queue
) -> None:
    sid = (await create(client, alice, cron="0 * * * *", every_s=None))["id"]
    async with engine.begin() as conn:  # a zone this worker's tzdata no longer has
        await conn.execute(
            text("UPDATE schedules SET timezone = 'Mars/Olympus', next_run_at = now() - interval '1 s' WHERE id = :id"),
            {"id": sid},
        )
    assert (await queue.fire_due_schedules()).parked
    shown = (await client.get(f"/schedules/{sid}", headers=alice)).json()
    assert shown["error"] == "unknown time zone 'Mars/Olympus'" and shown["error_at"] is not None
    assert (await client.get("/schedules", headers=alice)).json()["items"] == [shown]
    assert (await client.get(f"/schedules/{sid}", headers=bob)).status_code == 404
    assert (await create(client, bob))["error"] is None


async def test_max_schedules_is_a_429_with_the_limit_headers(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str], engine: AsyncEngine
) -> None:
    now = [0.0]
    app.state.runtime.queue.refusals = Refusals(clock=lambda: now[0])
    ops = await new_key(engine, "ops", admin=True)
    put = await client.put("/admin/tenants/alice/limits", json={"max_schedules": 2}, headers=ops)
    assert put.json()["effective"]["max_schedules"] == 2 and put.json()["defaults"]["max_schedules"] == 100
    kept = [(await create(client, alice))["id"] for _ in range(2)]
    refused = await client.post("/schedules", json={"agent": "demo", "every_s": 60}, headers=alice)
    assert refused.status_code == 429 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json() | {"detail": ""} == {
        "type": "urn:runq:problem:too_many_schedules", "title": "Too Many Requests", "status": 429,
        "code": "too_many_schedules", "detail": "", "instance": "/schedules", "limit": "schedules", "quota": 2.0,
    }  # fmt: skip
    assert (refused.headers["Retry-After"], refused.headers["RateLimit-Policy"]) == ("1", '"schedules";q=2')
    assert refused.headers["RateLimit"] == '"schedules";r=0;t=1'
    listed = (await client.get("/schedules", headers=alice)).json()["items"]
    assert sorted(s["id"] for s in listed) == sorted(kept)  # nothing created
    await create(client, bob)  # another tenant has room of its own
    tenants = (await client.get("/admin/tenants", headers=ops)).json()["items"]
    assert {t["tenant_id"]: t["use"]["schedules"] for t in tenants if t["tenant_id"] != "ops"} == {"alice": 2, "bob": 1}

    assert (await client.delete(f"/schedules/{kept[0]}", headers=alice)).status_code == 204
    now[0] = 1.0  # the refusal's Retry-After is over
    await create(client, alice)
