"""The admin routes (docs/contract.md, section 4) through the app, against real PostgreSQL."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import RUN_FIELDS, SECRET, RunDriver, create_run, new_key

ADMIN_RUN_FIELDS = RUN_FIELDS | {"locked_by", "locked_until"}


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(database_url=database_url, secret_key=SECRET, tenant_max_inflight=4))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:
        yield client


@pytest.fixture
async def admin(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "ops", admin=True)


@pytest.fixture
async def alice(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "alice")


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


ADMIN_REQUESTS = [
    ("GET", "/admin/runs", None),
    ("GET", f"/admin/runs/{uuid.uuid4()}", None),
    ("POST", f"/admin/runs/{uuid.uuid4()}/requeue", None),
    ("POST", f"/admin/runs/{uuid.uuid4()}/cancel", None),
    ("POST", f"/admin/runs/{uuid.uuid4()}/stream-token", None),
    ("GET", "/admin/workers", None),
    ("GET", "/admin/stats", None),
    ("GET", "/admin/tenants/alice", None),
    ("PUT", "/admin/tenants/alice", {"max_inflight": 1}),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_REQUESTS)
async def test_admin_routes_need_an_admin_key(
    client: httpx.AsyncClient, alice: dict[str, str], method: str, path: str, body: Any
) -> None:
    problem(await client.request(method, path, json=body, headers=alice), 403, "forbidden")
    problem(await client.request(method, path, json=body), 401, "unauthorized")


async def test_list_every_tenants_runs_with_lease_fields_and_filters(
    client: httpx.AsyncClient, engine: AsyncEngine, queue: Queue, admin: dict[str, str], alice: dict[str, str]
) -> None:
    bob = await new_key(engine, "bob")
    ids = [(await create_run(client, alice))["id"] for _ in range(3)]
    ids.append((await create_run(client, bob))["id"])
    claim = await RunDriver(queue).start()  # the oldest: alice's first run

    response = await client.get("/admin/runs", headers=admin)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [r["id"] for r in items] == ids[::-1]
    assert all(set(r) == ADMIN_RUN_FIELDS for r in items)
    leased = next(r for r in items if r["id"] == str(claim.run.id))
    assert leased["locked_by"] == claim.run.locked_by and leased["locked_until"] is not None

    only_bob = (await client.get("/admin/runs", params={"tenant": "bob"}, headers=admin)).json()
    assert [r["id"] for r in only_bob["items"]] == [ids[3]]
    only_leased = (await client.get("/admin/runs", params={"status": "leased"}, headers=admin)).json()
    assert [r["id"] for r in only_leased["items"]] == [ids[0]]

    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/admin/runs", params=params, headers=admin)).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]

    problem(await client.get("/admin/runs", params={"cursor": "nope"}, headers=admin), 400, "invalid_cursor")
    problem(await client.get("/admin/runs", params={"status": "lost"}, headers=admin), 422, "validation_error")
    # A tenant's own listing still hides the lease fields.
    mine = (await client.get("/runs", headers=alice)).json()["items"]
    assert all(set(r) == RUN_FIELDS for r in mine)


async def test_requeue_a_dead_run_keeps_its_history(
    client: httpx.AsyncClient, queue: Queue, admin: dict[str, str], alice: dict[str, str]
) -> None:
    run = await create_run(client, alice)
    driver = RunDriver(queue)
    await driver.start()
    last_seq = await driver.fail()

    response = await client.post(f"/admin/runs/{run['id']}/requeue", headers=admin)
    assert response.status_code == 200, response.text
    requeued = response.json()
    assert set(requeued) == ADMIN_RUN_FIELDS
    assert (requeued["status"], requeued["attempts"], requeued["error_code"]) == ("pending", 0, None)
    assert requeued["last_event_seq"] == last_seq + 1
    events = await queue.read_events(uuid.UUID(run["id"]))
    assert [e.type for e in events] == ["run.queued", "run.started", "run.failed", "run.queued"]
    assert [e.seq for e in events] == [1, 2, 3, 4]

    # Pending (and leased, and done) runs are not requeueable; unknown ids are 404.
    problem(await client.post(f"/admin/runs/{run['id']}/requeue", headers=admin), 409, "not_requeueable")
    problem(await client.post(f"/admin/runs/{uuid.uuid4()}/requeue", headers=admin), 404, "not_found")
    problem(await client.post("/admin/runs/not-a-uuid/requeue", headers=admin), 422, "invalid_id")


async def test_show_and_cancel_any_tenants_run(
    client: httpx.AsyncClient, admin: dict[str, str], alice: dict[str, str]
) -> None:
    run = await create_run(client, alice)
    shown = (await client.get(f"/admin/runs/{run['id']}", headers=admin)).json()
    assert shown["id"] == run["id"] and shown["locked_by"] is None
    response = await client.post(f"/admin/runs/{run['id']}/cancel", headers=admin)
    assert response.status_code == 202, response.text
    assert (response.json()["status"], response.json()["cancel_reason"]) == ("cancelled", "operator")
    problem(await client.post(f"/admin/runs/{run['id']}/cancel", headers=admin), 409, "run_finished")
    problem(await client.get(f"/admin/runs/{uuid.uuid4()}", headers=admin), 404, "not_found")


async def test_workers_group_live_leases(
    client: httpx.AsyncClient, queue: Queue, admin: dict[str, str], alice: dict[str, str]
) -> None:
    assert (await client.get("/admin/workers", headers=admin)).json() == {"items": []}
    runs = [await create_run(client, alice) for _ in range(3)]
    await queue.claim_batch(worker_id="host-a:1:aa", limit=2)
    await queue.claim_batch(worker_id="host-b:2:bb", limit=1)

    workers = {w["worker_id"]: w for w in (await client.get("/admin/workers", headers=admin)).json()["items"]}
    assert {w: len(info["leases"]) for w, info in workers.items()} == {"host-a:1:aa": 2, "host-b:2:bb": 1}
    leases = [lease for w in workers.values() for lease in w["leases"]]
    assert {lease["run_id"] for lease in leases} == {r["id"] for r in runs}
    for info in workers.values():
        assert info["last_heartbeat_at"] == max(lease["heartbeat_at"] for lease in info["leases"])
    for lease in leases:
        assert lease["tenant_id"] == "alice" and lease["attempt"] == 1
        assert lease["lease_age_s"] >= 0 and lease["locked_until"] is not None


async def test_stats(
    client: httpx.AsyncClient, queue: Queue, engine: AsyncEngine, admin: dict[str, str], alice: dict[str, str]
) -> None:
    bob = await new_key(engine, "bob")
    for headers in (alice, alice, alice, bob):
        await create_run(client, headers)
    dead = RunDriver(queue)
    await dead.start()
    await dead.fail()
    await queue.claim_batch(worker_id="w:1:x", limit=2)

    response = await client.get("/admin/stats", headers=admin)
    assert response.status_code == 200, response.text
    stats = response.json()
    assert stats["by_status"] == {"pending": 1, "leased": 2, "waiting": 0, "done": 0, "dead": 1, "cancelled": 0}
    assert stats["inflight_by_tenant"] == {"alice": 2}
    assert stats["dead_last_hour"] == 1
    assert stats["oldest_pending_age_s"] >= 0


async def test_tenant_cap_override(
    client: httpx.AsyncClient, queue: Queue, admin: dict[str, str], alice: dict[str, str]
) -> None:
    default = {"tenant_id": "alice", "max_inflight": None, "default_max_inflight": 4, "effective_max_inflight": 4}
    assert (await client.get("/admin/tenants/alice", headers=admin)).json() == default

    response = await client.put("/admin/tenants/alice", json={"max_inflight": 2}, headers=admin)
    assert response.status_code == 200, response.text
    capped = default | {"max_inflight": 2, "effective_max_inflight": 2}
    assert response.json() == capped
    assert (await client.get("/admin/tenants/alice", headers=admin)).json() == capped

    for _ in range(5):
        await create_run(client, alice)
    queue.tenant_max_inflight = 4  # the workers' RUNQ_TENANT_MAX_INFLIGHT
    claims = await queue.claim_batch(worker_id="w:1:x", limit=5)
    assert Counter(c.run.tenant_id for c in claims) == {"alice": 2}

    # 0 lifts the cap for this tenant, whatever the default.
    unlimited = await client.put("/admin/tenants/alice", json={"max_inflight": 0}, headers=admin)
    assert unlimited.json() == default | {"max_inflight": 0, "effective_max_inflight": 0}
    assert len(await queue.claim_batch(worker_id="w:1:x", limit=5)) == 3

    for bad in ({"max_inflight": -1}, {"max_inflight": "3"}, {}, {"max_inflight": 1, "x": 1}):
        problem(await client.put("/admin/tenants/alice", json=bad, headers=admin), 422, "validation_error")
    # PostgreSQL text cannot hold NUL: refused before it gets there.
    problem(await client.get("/admin/tenants/a%00b", headers=admin), 422, "validation_error")
    problem(await client.get("/admin/runs", params={"tenant": "a\x00b"}, headers=admin), 422, "validation_error")


async def test_openapi_lists_admin_problems(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    requeue = paths["/admin/runs/{run_id}/requeue"]["post"]["responses"]
    assert {"200", "401", "403", "404", "409", "503"} <= set(requeue)
    assert "application/problem+json" in requeue["409"]["content"]
    for path in ("/admin/runs", "/admin/workers", "/admin/stats", "/admin/tenants/{tenant}"):
        for operation in paths[path].values():
            assert {"401", "403"} <= set(operation["responses"]), path


async def test_admin_stream_token_follows_another_tenants_run(
    client: httpx.AsyncClient, admin: dict[str, str], alice: dict[str, str]
) -> None:
    run = await create_run(client, alice)
    own = await client.post(f"/runs/{run['id']}/stream-token", headers=admin)
    problem(own, 404, "not_found")  # the tenant route stays tenant-scoped, admin or not
    token = (await client.post(f"/admin/runs/{run['id']}/stream-token", headers=admin)).json()["token"]
    page = await client.get(
        f"/runs/{run['id']}/events", params={"token": token}, headers={"Accept": "application/json"}
    )
    assert [e["type"] for e in page.json()["items"]] == ["run.queued"]
    other = await create_run(client, alice)
    refused = await client.get(f"/runs/{other['id']}/events", params={"token": token})
    problem(refused, 401, "unauthorized")
