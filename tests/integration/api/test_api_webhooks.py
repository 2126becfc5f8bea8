"""Webhooks end to end in one process: the API creates runs with webhooks, the worker's sender
posts their events to a real local receiver; signatures are checked independently.

Traffic goes only to receivers on 127.0.0.0/8 and [::1]; every other address in here is refused
by the guard before anything connects (names resolve through a fake resolver, not DNS).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.webhooks import url_guard
from app.guards.ssrf import MAX_URL_LENGTH, UrlGuard
from app.main import create_app
from app.settings import Settings
from app.worker.webhooks import sender_from_settings
from tests.api_support import SECRET, create_run, new_key, wait_for
from tests.webhook_support import FakeResolver, Receiver, verify_signature

RESOLVER = FakeResolver({"hooks.test": ["127.0.0.1"], "internal.test": ["127.0.0.2"]})


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        secret_key=SECRET,
        poll_s=0.2,
        retry_base_s=0.05,
        retry_max_s=0.2,
        webhook_timeout_s=1.0,
        webhook_allow_hosts=["127.0.0.1"],
    )


@pytest.fixture
def guard(settings: Settings) -> UrlGuard:
    return UrlGuard(settings.webhook_allow_hosts, resolver=RESOLVER)


@pytest.fixture
async def app(settings: Settings, guard: UrlGuard) -> AsyncIterator[FastAPI]:
    app = create_app(settings, sse_ping_s=0.2)
    app.dependency_overrides[url_guard] = lambda: guard
    async with app.router.lifespan_context(app):
        yield app


@contextlib.asynccontextmanager
async def sending(app: FastAPI, settings: Settings, guard: UrlGuard) -> AsyncIterator[None]:
    """A worker's webhook sender on this loop (the same code a worker process runs)."""
    sender = sender_from_settings(app.state.runtime.queue, settings, guard=guard)
    task = asyncio.create_task(sender.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def cancelled_run(client: httpx.AsyncClient, key: dict[str, str], url: str, **webhook: Any) -> dict[str, Any]:
    """A run whose webhook fires at once: created pending, then cancelled (run.cancelled)."""
    run = await create_run(client, key, webhook={"url": url, **webhook})
    assert (await client.post(f"/runs/{run['id']}/cancel", headers=key)).status_code == 202
    return run


async def deliveries(client: httpx.AsyncClient, key: dict[str, str], run_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/runs/{run_id}/webhooks", headers=key)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def settled(client: httpx.AsyncClient, key: dict[str, str], run_id: str, status: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = await deliveries(client, key, run_id)
        return found[0] if found and found[0]["status"] == status else None

    result: dict[str, Any] = await wait_for(check, within=15)
    return result


async def test_delivery_is_signed_per_the_spec_and_carries_run_and_event(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], settings: Settings, guard: UrlGuard
) -> None:
    secret = (await client.get("/webhook-secret", headers=alice)).json()["secret"]
    assert secret.startswith("whsec_")
    assert (await client.get("/webhook-secret", headers=alice)).json()["secret"] == secret  # stable
    async with Receiver() as receiver, sending(app, settings, guard):
        run = await cancelled_run(client, alice, receiver.url)
        delivery = await settled(client, alice, run["id"], "delivered")
    (request,) = receiver.requests
    assert verify_signature(secret, request.headers, request.body)
    assert request.headers["webhook-id"] == delivery["id"]
    assert request.headers["content-type"] == "application/json"
    body = request.json
    assert body["type"] == "run.cancelled"
    assert body["run"] == (await client.get(f"/runs/{run['id']}", headers=alice)).json()
    assert body["event"]["type"] == "run.cancelled" and body["event"]["seq"] == body["run"]["last_event_seq"]
    assert set(body["event"]) == {"seq", "type", "data", "attempt", "created_at"}
    assert (delivery["attempts"], delivery["last_status_code"], delivery["event_type"]) == (1, 200, "run.cancelled")


async def test_retries_keep_the_webhook_id_until_a_2xx(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], settings: Settings, guard: UrlGuard
) -> None:
    async with Receiver(answers=[500, 503, 302]) as receiver, sending(app, settings, guard):
        run = await cancelled_run(client, alice, receiver.url)
        delivery = await settled(client, alice, run["id"], "delivered")
    assert len(receiver.requests) == 4  # a 3xx is an answer, retried, never followed
    assert {r.headers["webhook-id"] for r in receiver.requests} == {delivery["id"]}
    assert delivery["attempts"] == 4


async def test_410_stops_and_an_operator_can_redeliver(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, settings: Settings,
    guard: UrlGuard,
) -> None:
    ops = await new_key(engine, "ops", admin=True)
    async with Receiver(answers=[410]) as receiver, sending(app, settings, guard):
        run = await cancelled_run(client, alice, receiver.url)
        delivery = await settled(client, alice, run["id"], "stopped")
        assert (delivery["attempts"], delivery["last_status_code"]) == (1, 410)
        again = await client.post(f"/admin/webhooks/{delivery['id']}/redeliver", headers=ops)
        assert again.status_code == 202, again.text
        await settled(client, alice, run["id"], "delivered")
        pending = await cancelled_run(client, alice, "http://127.0.0.1:9/")  # nobody listens
        await wait_for(lambda: deliveries(client, alice, pending["id"]))
        refused = await client.post(f"/admin/webhooks/{(await deliveries(client, alice, pending['id']))[0]['id']}/redeliver", headers=ops)
        assert (refused.status_code, refused.json()["code"]) == (409, "not_redeliverable")
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery["id"]] * 2


async def test_gives_up_after_the_retry_window_and_lists_it_failed(
    database_url: str, client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, settings: Settings,
    app: FastAPI, guard: UrlGuard,
) -> None:
    ops = await new_key(engine, "ops", admin=True)
    short = settings.model_copy(update={"webhook_retry_for_s": 0.3})
    async with Receiver(default=500) as receiver, sending(app, short, guard):
        run = await cancelled_run(client, alice, receiver.url)
        delivery = await settled(client, alice, run["id"], "failed")
    # Retries within the window are another test's; on a loaded machine 0.3 s may hold only one.
    assert delivery["attempts"] == len(receiver.requests) >= 1
    assert delivery["last_error"] == "the receiver answered 500"
    listed = (await client.get("/admin/webhooks", params={"status": "failed"}, headers=ops)).json()["items"]
    assert [d["id"] for d in listed] == [delivery["id"]]
    other = await cancelled_run(client, alice, "http://127.0.0.1:9/")
    by_run = (await client.get("/admin/webhooks", params={"run_id": run["id"]}, headers=ops)).json()["items"]
    assert [d["id"] for d in by_run] == [delivery["id"]] and other["id"] != run["id"]
    assert (await client.get("/admin/webhooks", headers=alice)).status_code == 403


async def test_rotation_signs_with_both_secrets_for_a_day(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, settings: Settings,
    guard: UrlGuard,
) -> None:
    old = (await client.get("/webhook-secret", headers=alice)).json()["secret"]
    new = (await client.post("/webhook-secret/rotate", headers=alice)).json()["secret"]
    assert new != old and (await client.get("/webhook-secret", headers=alice)).json()["secret"] == new
    async with Receiver() as receiver, sending(app, settings, guard):
        run = await cancelled_run(client, alice, receiver.url)
        await settled(client, alice, run["id"], "delivered")
        async with engine.begin() as conn:  # a day later
            await conn.execute(text("UPDATE webhook_secrets SET previous_until = now() - interval '1 s'"))
        later = await cancelled_run(client, alice, receiver.url)
        await settled(client, alice, later["id"], "delivered")
    first, second = receiver.requests
    assert len(first.headers["webhook-signature"].split(" ")) == 2
    assert verify_signature(old, first.headers, first.body) and verify_signature(new, first.headers, first.body)
    assert verify_signature(new, second.headers, second.body) and not verify_signature(old, second.headers, second.body)


async def test_secrets_are_sealed_in_the_database(client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine) -> None:
    secret = (await client.get("/webhook-secret", headers=alice)).json()["secret"]
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT secret FROM webhook_secrets"))).scalar_one()
    assert secret.removeprefix("whsec_") not in stored


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("{loopback2}", "webhook_url_forbidden"),
        ("{ipv6}", "webhook_url_forbidden"),
        ("http://0.0.0.0:{port}/", "webhook_url_forbidden"),
        ("http://[::ffff:127.0.0.1]:{port}/", "webhook_url_forbidden"),
        ("http://internal.test:{port}/", "webhook_url_forbidden"),  # resolves to 127.0.0.2
        ("http://10.0.0.1/", "webhook_url_forbidden"),
        ("http://169.254.169.254/latest/meta-data/", "webhook_url_forbidden"),
        ("ftp://127.0.0.1:{port}/", "webhook_url_invalid"),
        ("file:///etc/passwd", "webhook_url_invalid"),
        ("http://127.0.0.1/" + "a" * MAX_URL_LENGTH, "webhook_url_too_long"),
        ("http://nowhere.test/", "webhook_url_unresolvable"),
    ],
)
async def test_forbidden_urls_are_refused_at_create_and_never_contacted(
    client: httpx.AsyncClient, alice: dict[str, str], url: str, code: str
) -> None:
    async with Receiver("127.0.0.2") as loopback2, Receiver("::1") as ipv6:
        port = loopback2.url.rsplit(":", 1)[1].split("/")[0]
        target = url.format(loopback2=loopback2.url, ipv6=ipv6.url, port=port)
        response = await client.post("/runs", json={"agent": "demo", "webhook": {"url": target}}, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, code), response.text
        schedule = {"every_s": 60, "agent": "demo", "webhook": {"url": target}}
        response = await client.post("/schedules", json=schedule, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, code), response.text
    assert loopback2.requests == [] and ipv6.requests == []


async def test_bad_webhook_shapes_are_422(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    for webhook in ({"url": "http://127.0.0.1/", "events": ["run.started"]}, {"url": "http://127.0.0.1/", "events": []},
                    {"url": 5}, {"events": ["run.failed"]}, {"url": "http://127.0.0.1/", "secret": "x"}):  # fmt: skip
        response = await client.post("/runs", json={"agent": "demo", "webhook": webhook}, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, "validation_error"), webhook


async def test_a_host_that_rebinds_to_an_internal_address_is_refused_at_delivery(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], settings: Settings
) -> None:
    rebinding = FakeResolver({"rebind.test": ["127.0.0.1"]})
    guard = UrlGuard(settings.webhook_allow_hosts, resolver=rebinding)
    app.dependency_overrides[url_guard] = lambda: guard
    async with Receiver("127.0.0.2") as internal:
        port = internal.url.rsplit(":", 1)[1].split("/")[0]
        run = await cancelled_run(client, alice, f"http://rebind.test:{port}/hooks")
        rebinding.names["rebind.test"] = ["127.0.0.2"]  # DNS changed after the check at create
        async with sending(app, settings, guard):
            delivery = await settled(client, alice, run["id"], "failed")
    assert delivery["last_error"].startswith("webhook_url_forbidden")
    assert internal.requests == []


async def test_events_filter_and_run_waiting_opt_in(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], settings: Settings, guard: UrlGuard
) -> None:
    run = await cancelled_run(client, alice, "http://hooks.test/x", events=["run.completed", "run.completed"])
    assert (await client.get(f"/runs/{run['id']}", headers=alice)).status_code == 200
    assert await deliveries(client, alice, run["id"]) == []  # run.cancelled was not asked for
    async with Receiver() as receiver, sending(app, settings, guard):
        port = receiver.url.rsplit(":", 1)[1].split("/")[0]
        named = await cancelled_run(client, alice, f"http://hooks.test:{port}/hooks")
        await settled(client, alice, named["id"], "delivered")
    assert receiver.requests[0].headers["host"] == f"hooks.test:{port}"  # the name, not the pinned address


async def test_another_tenants_deliveries_and_secret_are_not_visible(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    run = await cancelled_run(client, alice, "http://127.0.0.1:9/")
    response = await client.get(f"/runs/{run['id']}/webhooks", headers=bob)
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert (await client.get(f"/runs/{run['id']}/webhooks", headers=alice)).json()["items"][0]["tenant_id"] == "alice"
    secrets = [(await client.get("/webhook-secret", headers=k)).json()["secret"] for k in (alice, bob)]
    assert secrets[0] != secrets[1]
    assert (await client.get("/runs/not-a-uuid/webhooks", headers=alice)).json()["code"] == "invalid_id"
    assert (await client.get("/webhook-secret")).status_code == 401
