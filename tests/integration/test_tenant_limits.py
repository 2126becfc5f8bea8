"""Tenant limits (docs/limits.md) with two API processes on one database: each limit holds
cluster-wide, a refusal is a 429 with Retry-After and the RateLimit headers, nothing is created
or opened past a limit, and a dead process's streams stop counting within the presence TTL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cron import Timing
from app.db.engine import create_engine
from app.errors import LimitExceeded
from app.queue import LimitDefaults, NewRun, Queue
from app.queue.refusals import Refusals
from tests.api_support import ApiProcess, new_key, wait_for
from tests.integration.test_hooks_cli import runq
from tests.integration.test_schedules_firing import set_due

TTL_S = 1.5
ENV = {"RUNQ_PRESENCE_TTL_S": str(TTL_S), "RUNQ_POLL_S": "0.2"}


@pytest.fixture(scope="module")
def apis(database_url: str) -> Iterator[list[str]]:
    """Two API processes on the test database; their base URLs."""
    processes = [ApiProcess(database_url, env=ENV) for _ in range(2)]
    try:
        for process in processes:
            process.wait_ready()
        yield [p.base_url for p in processes]
    finally:
        for process in processes:
            process.stop()


@pytest.fixture
async def clients(apis: list[str]) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=10)) for url in apis]


@pytest.fixture
def tenant() -> str:
    """A tenant of the test's own: an API process remembers a tenant's refusal for as long as it
    told the client to wait (app/queue/refusals.py), and the processes outlive each test."""
    return f"alice-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def admin(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "ops", admin=True)


async def set_limits(client: httpx.AsyncClient, admin: dict[str, str], tenant: str, **limits: Any) -> dict[str, Any]:
    response = await client.put(f"/admin/tenants/{tenant}/limits", json=limits, headers=admin)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def post_run(client: httpx.AsyncClient, headers: dict[str, str], key: str | None = None) -> httpx.Response:
    extra = {"Idempotency-Key": key} if key else {}
    return await client.post("/runs", json={"agent": "demo", "input": {}}, headers=headers | extra)


def assert_refused(response: httpx.Response, code: str, policy: str) -> int:
    """A 429 problem with ``code`` and the limit headers; its Retry-After."""
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code and body["status"] == 429
    retry_after = int(response.headers["Retry-After"])
    assert retry_after >= 1
    assert response.headers["RateLimit-Policy"].startswith(f'"{policy}";q=')
    assert response.headers["RateLimit"] == f'"{policy}";r=0;t={retry_after}'
    return retry_after


async def count_runs(engine: AsyncEngine, tenant: str) -> int:
    async with engine.connect() as conn:
        query = text("SELECT count(*) FROM agent_runs WHERE tenant_id = :t")
        return int((await conn.execute(query, {"t": tenant})).scalar_one())


async def test_create_rate_holds_across_two_api_processes(
    clients: list[httpx.AsyncClient], engine: AsyncEngine, admin: dict[str, str], tenant: str
) -> None:
    alice, bob = await new_key(engine, tenant), await new_key(engine, "bob")
    await set_limits(clients[0], admin, tenant, create_per_s=5, create_burst=5)
    statuses: list[int] = []
    started = time.monotonic()

    async def hammer(client: httpx.AsyncClient) -> None:
        while time.monotonic() - started < 2.0:
            statuses.append((await post_run(client, alice)).status_code)

    await asyncio.gather(*(hammer(c) for c in clients for _ in range(3)))
    elapsed = time.monotonic() - started
    accepted = statuses.count(201)
    assert set(statuses) == {201, 429}
    assert accepted <= 5 + 5 * elapsed + 1, (accepted, elapsed)
    assert accepted >= 5  # the burst at least

    for _ in range(20):  # a token may have come back since the hammering stopped
        refused = await post_run(clients[1], alice)
        if refused.status_code != 201:
            break
        accepted += 1
    retry_after = assert_refused(refused, "rate_limited", "create")
    assert await count_runs(engine, tenant) == accepted  # a refused create stores nothing
    assert refused.headers["RateLimit-Policy"] == '"create";q=5;w=1'
    assert (await post_run(clients[0], bob)).status_code == 201  # another tenant is not limited
    metrics = (await clients[1].get("/metrics")).text
    assert f'runq_limited_total{{limit="rate",tenant="{tenant}"}}' in metrics
    await asyncio.sleep(retry_after)
    assert (await post_run(clients[1], alice)).status_code == 201  # Retry-After honoured: room again


async def test_idempotent_repeat_is_answered_and_not_counted(
    clients: list[httpx.AsyncClient], engine: AsyncEngine, admin: dict[str, str], tenant: str
) -> None:
    alice = await new_key(engine, tenant)
    await set_limits(clients[0], admin, tenant, create_per_s=0.01, create_burst=1, max_pending=1)
    first = await post_run(clients[0], alice, key="k1")
    assert first.status_code == 201
    for client in clients:  # the bucket is empty and max_pending reached: the repeat still answers
        repeat = await post_run(client, alice, key="k1")
        assert repeat.status_code == 200 and repeat.json()["id"] == first.json()["id"]
    assert_refused(await post_run(clients[1], alice, key="k2"), "too_many_pending", "pending")


async def test_max_pending_across_two_api_processes(
    clients: list[httpx.AsyncClient], engine: AsyncEngine, admin: dict[str, str], tenant: str
) -> None:
    alice = await new_key(engine, tenant)
    await set_limits(clients[1], admin, tenant, max_pending=3)
    results = await asyncio.gather(*(post_run(clients[i % 2], alice) for i in range(8)))
    created = [r for r in results if r.status_code == 201]
    assert len(created) == 3
    for response in results:
        if response.status_code != 201:
            assert_refused(response, "too_many_pending", "pending")
    assert await count_runs(engine, tenant) == 3
    cancelled = await clients[0].post(f"/runs/{created[0].json()['id']}/cancel", headers=alice)
    assert cancelled.status_code == 202
    await asyncio.sleep(1)  # the refusals' Retry-After: each process holds a refusal that long
    assert (await post_run(clients[1], alice)).status_code == 201  # a cancelled run frees its place
    await set_limits(clients[0], admin, tenant, max_pending=None)  # back to the default: none
    assert (await post_run(clients[1], alice)).status_code == 201


@contextlib.asynccontextmanager
async def open_stream(client: httpx.AsyncClient, run_id: str, headers: dict[str, str]) -> AsyncIterator[int]:
    async with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
        if response.status_code == 429:
            await response.aread()
            assert_refused(response, "too_many_streams", "streams")
        yield response.status_code


async def test_max_streams_across_processes_and_a_dead_process_releases_its_streams(
    clients: list[httpx.AsyncClient], database_url: str, engine: AsyncEngine, admin: dict[str, str], tenant: str
) -> None:
    alice = await new_key(engine, tenant)
    run_id = (await post_run(clients[0], alice)).json()["id"]
    await set_limits(clients[0], admin, tenant, max_streams=2)
    doomed = ApiProcess(database_url, env=ENV)
    try:
        doomed.wait_ready()
        async with (
            httpx.AsyncClient(base_url=doomed.base_url, timeout=10) as third,
            open_stream(third, run_id, alice) as held_by_doomed,
            open_stream(clients[0], run_id, alice) as held,
        ):
            assert (held_by_doomed, held) == (200, 200)
            for client in clients:
                async with open_stream(client, run_id, alice) as status:
                    assert status == 429
            use = (await clients[1].get(f"/admin/tenants/{tenant}/limits", headers=admin)).json()["use"]
            assert use["streams"] == 2
            doomed.proc.send_signal(signal.SIGKILL)
            doomed.proc.wait()
            started = time.monotonic()

            async def room() -> bool:
                async with open_stream(clients[1], run_id, alice) as status:
                    return status == 200

            await wait_for(room, within=TTL_S * 3, every=0.2)
            assert time.monotonic() - started <= TTL_S * 3
    finally:
        doomed.stop()

    async def released() -> bool:  # closed streams stop counting at once
        use = (await clients[1].get(f"/admin/tenants/{tenant}/limits", headers=admin)).json()["use"]
        return use["streams"] == 0

    await wait_for(released, within=5)


async def test_schedule_slot_at_max_pending_is_created_later(engine: AsyncEngine) -> None:
    queue = Queue(engine, limits=LimitDefaults(max_pending=1))
    blocker, _ = await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    schedule_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO schedules (id, tenant_id, every_s, timezone, agent, input_json, budget_json,"
                " priority, max_attempts, next_run_at) VALUES (:id, 'alice', 60, 'UTC', 'demo', '{}', '{}',"
                " 0, 3, now() - interval '1 second')"
            ),
            {"id": schedule_id},
        )
    held = await queue.fire_due_schedules()  # full: the slot waits, still due, for Retry-After
    assert (held.runs, held.held) == ([], 1)
    assert (await queue.get_schedule(schedule_id, tenant_id=None)).last_run_id is None
    await queue.request_cancel(blocker.id, tenant_id="alice")
    assert (await queue.fire_due_schedules()).runs == []  # not looked at before its Retry-After
    async with engine.begin() as conn:  # the second passes
        await conn.execute(text("UPDATE schedules SET not_before = now() WHERE id = :id"), {"id": schedule_id})
    fired = (await queue.fire_due_schedules()).runs
    assert [s for s, _ in fired] == [schedule_id]
    assert (await queue.get_schedule(schedule_id, tenant_id=None)).next_run_at.timestamp() > time.time()


async def test_one_pass_fires_no_more_slots_than_the_tenants_room(engine: AsyncEngine) -> None:
    """Many due schedules of a tenant near its max_pending: the pass fills the room, no more
    (its admissions cannot count the runs their own statement inserts), and holds the rest."""
    queue = Queue(engine, limits=LimitDefaults(max_pending=3))
    await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    timing = Timing(cron=None, every_s=60).check()
    for tenant in ("alice",) * 5 + ("bob",) * 4:
        schedule = await queue.create_schedule(
            tenant_id=tenant, timing=timing, agent="demo", input={}, budget={}, priority=0, max_attempts=1
        )
        await set_due(engine, schedule.id)
    fired = await queue.fire_due_schedules()
    assert (len(fired.runs), fired.held) == (2 + 3, 3 + 1)
    assert await count_runs(engine, "alice") == await count_runs(engine, "bob") == 3


async def test_a_pass_and_api_creates_at_once_stay_within_max_pending(engine: AsyncEngine) -> None:
    await Queue(engine).set_tenant_limits("alice", {"max_pending": 4})
    timing = Timing(cron=None, every_s=60).check()
    for _ in range(4):
        schedule = await Queue(engine).create_schedule(
            tenant_id="alice", timing=timing, agent="demo", input={}, budget={}, priority=0, max_attempts=1
        )
        await set_due(engine, schedule.id)
    creates = [Queue(engine).enqueue(NewRun(tenant_id="alice", agent="demo", input={})) for _ in range(4)]
    results = await asyncio.gather(Queue(engine).fire_due_schedules(), *creates, return_exceptions=True)
    assert not [r for r in results if isinstance(r, Exception) and not isinstance(r, LimitExceeded)]
    assert await count_runs(engine, "alice") == 4


async def test_a_refusal_is_answered_without_the_database_until_its_wait_is_over(engine: AsyncEngine) -> None:
    now = [0.0]
    queue = Queue(engine, limits=LimitDefaults(max_pending=1))
    queue.refusals = Refusals(clock=lambda: now[0])
    await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    with pytest.raises(LimitExceeded) as refused:
        await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    assert (refused.value.limit, refused.value.retry_after_s) == ("pending", 1.0)
    async with engine.begin() as conn:  # room again, but this process was told to wait a second
        await conn.execute(text("DELETE FROM agent_runs"))
    now[0] = 0.75
    with pytest.raises(LimitExceeded) as remembered:
        await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    assert (remembered.value.limit, remembered.value.retry_after_s) == ("pending", 0.25)
    # a repeat with an idempotency key may name a run already created: the database answers
    assert (await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}, idempotency_key="k")))[1]
    await queue.enqueue(NewRun(tenant_id="bob", agent="demo", input={}))  # another tenant was never refused
    now[0] = 1.0
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM agent_runs"))
    assert (await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={})))[1]


async def test_unlimited_tenants_are_not_locked_or_counted(engine: AsyncEngine, queue: Queue) -> None:
    for _ in range(3):
        await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM tenant_buckets"))).scalar_one() == 0


async def test_a_rate_limited_burst_queues_at_its_rate_behind_another_tenants_run(
    engine: AsyncEngine, queue: Queue
) -> None:
    """The k-th create of a burst ranks (k - 1) / rate seconds after the first, less what its
    bucket refilled meanwhile (migration 0020): a run another tenant creates just after the burst
    is claimed second, not eleventh; the burst's own runs keep their order, and their
    available_at is their creation."""
    limited = Queue(engine, limits=LimitDefaults(create_per_s=1, create_burst=10))
    burst = [(await limited.enqueue(NewRun(tenant_id="alice", agent="demo", input={"k": k})))[0] for k in range(10)]
    bob, _ = await queue.enqueue(NewRun(tenant_id="bob", agent="demo", input={}))
    claimed = await queue.claim_batch(worker_id="w1", limit=3)
    assert [c.run.id for c in claimed] == [burst[0].id, bob.id, burst[1].id]
    async with engine.connect() as conn:
        ranks = (await conn.execute(text(
            "SELECT CAST(extract(epoch FROM queue_rank - created_at) AS float8) AS behind,"
            " CAST(extract(epoch FROM available_at - created_at) AS float8) AS due"
            " FROM agent_runs WHERE tenant_id = 'alice' ORDER BY created_at"
        ))).all()  # fmt: skip
    behind = [r.behind for r in ranks]
    assert behind[0] == 0 and behind == sorted(behind) and behind[-1] > 5
    assert all(b <= k + 1e-6 for k, b in enumerate(behind))
    assert all(r.due == 0 for r in ranks)


async def test_a_tenants_creates_waiting_on_its_bucket_leave_the_pool_to_the_others(
    engine: AsyncEngine, database_url: str
) -> None:
    """While a tenant's creates wait for its bucket's row, they hold at most their share of the
    process's connections (app/queue/turns.py): another tenant's create goes through."""
    small = create_engine(database_url, pool_size=4)  # a share of one connection
    queue = Queue(small, limits=LimitDefaults(create_per_s=1000))
    try:
        await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))  # her bucket's row exists
        async with engine.begin() as conn:
            await conn.execute(text("SELECT 1 FROM tenant_buckets WHERE tenant_id = 'alice' FOR UPDATE"))
            burst = [asyncio.create_task(queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))) for _ in range(8)]

            async def alice_waits_on_the_row() -> bool:
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                return bool((await conn.execute(text(waiting))).scalar_one())

            await wait_for(alice_waits_on_the_row)
            _, created = await asyncio.wait_for(queue.enqueue(NewRun(tenant_id="bob", agent="demo", input={})), 10)
            assert created and not any(task.done() for task in burst)
        assert all(created for _, created in await asyncio.gather(*burst))
    finally:
        await small.dispose()
    assert await count_runs(engine, "alice") == 9


def test_retry_after_is_whole_seconds() -> None:
    from app.api.quotas import limit_headers

    exc = LimitExceeded(tenant_id="t", limit="rate", quota=20, retry_after_s=0.05, window_s=2.5)
    assert limit_headers(exc) == {
        "Retry-After": "1",
        "RateLimit-Policy": '"create";q=20;w=3',
        "RateLimit": '"create";r=0;t=1',
    }


async def test_runq_tenants_list_and_limits(engine: AsyncEngine, queue: Queue, database_url: str) -> None:
    await new_key(engine, "alice")
    await queue.enqueue(NewRun(tenant_id="alice", agent="demo", input={}))
    shown = json.loads(runq(database_url, "tenants", "limits", "alice", "--max-pending", "5", "--json").stdout)
    assert shown[0]["overrides"]["max_pending"] == 5 and shown[0]["use"]["pending"] == 1
    await queue.create_schedule(
        tenant_id="alice", timing=Timing(cron=None, every_s=60).check(), agent="demo", input={}, budget={},
        priority=0, max_attempts=1,
    )  # fmt: skip
    args = ("--create-per-s", "2", "--max-schedules", "7", "--json")
    shown = json.loads(runq(database_url, "tenants", "limits", "alice", *args).stdout)
    assert shown[0]["effective"] == {
        "create_per_s": 2.0, "create_burst": 4, "max_pending": 5, "max_streams": 0, "max_inflight": 0,
        "max_schedules": 7,
    }  # fmt: skip
    assert shown[0]["use"]["schedules"] == 1 and shown[0]["defaults"]["max_schedules"] == 100
    runq(database_url, "tenants", "limits", "alice", "--max-pending", "default")
    listed = json.loads(runq(database_url, "tenants", "list", "--json").stdout)
    assert [(t["tenant_id"], t["overrides"]["max_pending"]) for t in listed] == [("alice", None)]
    table = runq(database_url, "tenants", "list").stdout
    assert "alice" in table and "MAX_PENDING" in table and "MAX_SCHEDULES" in table


async def test_python_client_waits_out_retry_after_and_creates(
    clients: list[httpx.AsyncClient], apis: list[str], engine: AsyncEngine, admin: dict[str, str], tenant: str
) -> None:
    from runq_client import AsyncClient

    alice = await new_key(engine, tenant)
    await set_limits(clients[0], admin, tenant, create_per_s=1, create_burst=1)
    runq_client = AsyncClient(apis[1], alice["Authorization"].removeprefix("Bearer "))
    try:
        await runq_client.runs.create("demo")
        started = time.monotonic()
        await runq_client.runs.create("demo")  # 429 with Retry-After: 1, then created
        assert time.monotonic() - started >= 0.5
    finally:
        await runq_client.http.aclose()
    assert await count_runs(engine, tenant) == 2
