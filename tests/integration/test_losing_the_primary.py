"""Losing the primary (DESIGN §20) on a real server: a host list that starts with a dead host,
and a database that stops taking writes while an API and a worker use it.

The database is a throwaway one: ``ALTER DATABASE … SET default_transaction_read_only`` makes
every new session read-only (writes get SQLSTATE 25006, as on a standby or behind a stale
address), and terminating runq's sessions forces them onto it, as a failover does.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db.connect import CONNECT_TIMEOUT_S, connect
from app.db.engine import create_engine
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn, parse_url
from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET, free_port, new_key
from tests.conftest import _admin
from tests.worker_support import in_process_worker, wait_until

RECOVERY_S = 2.0  # creates and /readyz back within this of the primary taking writes


@pytest.fixture(scope="module")
def throwaway(server_url: str) -> Iterator[str]:
    """A migrated database of this module's own, which its tests make read-only."""
    name = f"runq_primary_{uuid.uuid4().hex[:10]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def behind_a_dead_host(url: str) -> str:
    """``url`` with a host that refuses connections listed first (a primary that died)."""
    parsed = parse_url(url)
    (server,) = parsed.hosts
    return f"postgresql://{parsed.user}@127.0.0.1:{free_port()},{server.host}:{server.port}/{parsed.database}"


async def test_every_connection_tries_the_whole_list(throwaway: str) -> None:
    url = behind_a_dead_host(throwaway)
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT current_database()")) == parse_url(throwaway).database
    finally:
        await engine.dispose()
    listen = await asyncpg.connect(asyncpg_dsn(url))  # the LISTEN session's way in
    await listen.close()
    await asyncio.to_thread(upgrade, url)  # migrations (already at head: nothing to apply)


@contextmanager
def silent_host() -> Iterator[int]:
    """A port that takes the TCP handshake and then says nothing (a machine gone without a
    word looks the same: no refusal, only a wait)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # never accepted, never answered
        yield int(sock.getsockname()[1])


async def test_a_silent_host_costs_its_own_timeout_not_the_whole_list(throwaway: str) -> None:
    parsed = parse_url(throwaway)
    (server,) = parsed.hosts
    with silent_host() as port:
        url = f"postgresql://{parsed.user}@127.0.0.1:{port},{server.host}:{server.port}/{parsed.database}"
        started = time.monotonic()
        listen = await connect(asyncpg_dsn(url), per_host_timeout_s=0.5)
        await listen.close()
        engine = create_engine(url, pool_size=1)
        try:
            async with engine.connect() as conn:
                assert await conn.scalar(text("SELECT 1")) == 1
        finally:
            await engine.dispose()
    # The LISTEN session's 0.5 s and the pool's CONNECT_TIMEOUT_S, not asyncpg's 60 s each.
    assert time.monotonic() - started < 0.5 + CONNECT_TIMEOUT_S + 2


@asynccontextmanager
async def no_primary(server_url: str, database: str) -> AsyncIterator[None]:
    """The database takes no writes: every session from now on is read-only, and runq's
    present ones are ended, as when the primary goes and a standby answers in its place."""
    admin = await asyncpg.connect(asyncpg_dsn(server_url))
    try:
        await admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database
        )
        yield
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        await admin.close()


@pytest.mark.parametrize("hosts", ["one host", "a dead host first"])
async def test_no_primary_is_a_503_and_runq_is_back_within_seconds(
    server_url: str, throwaway: str, hosts: str
) -> None:
    url = throwaway if hosts == "one host" else behind_a_dead_host(throwaway)
    database = parse_url(throwaway).database or ""
    keys = create_engine(url, pool_size=1)
    headers = await new_key(keys, "alice")
    app = create_app(Settings(database_url=url, secret_key=SECRET, poll_s=0.2), sse_ping_s=0.2)
    statuses: Counter[int] = Counter()

    async def create(**body: object) -> httpx.Response:
        response = await client.post("/runs", json={"agent": "demo", "input": body}, headers=headers)
        statuses[response.status_code] += 1
        return response

    async def run_of(run_id: str) -> dict[str, object]:
        return (await client.get(f"/runs/{run_id}", headers=headers)).json()  # type: ignore[no-any-return]

    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://runq.test") as client,
            # The outage is shorter than the lease: the run in flight must go on, not start again.
            in_process_worker(url, concurrency=2, lease_s=6.0, heartbeat_s=0.3),
        ):
            long = (await create(steps=40, step_s=0.1)).json()
            await wait_until(lambda: _status_is(run_of, long["id"], "leased"), within=5, what="the run to start")

            async with no_primary(server_url, database):
                refused = await wait_until(
                    lambda: _refused(create), within=5, what="a create refused while no primary takes writes"
                )
                assert int(refused.headers["Retry-After"]) > 0
                assert refused.json()["code"] == "database_unavailable"
                assert (await client.get("/readyz")).status_code == 503
                # The background loops keep failing for a while: claims, heartbeats, the writer.
                outage_ends = time.monotonic() + 1.5
                while time.monotonic() < outage_ends:
                    await create(steps=0)
                    assert (await client.get("/readyz")).status_code == 503

            writable_at = time.monotonic()
            await wait_until(lambda: _ready(client), within=RECOVERY_S, what="/readyz after the outage")
            after = await wait_until(lambda: _created(create), within=RECOVERY_S, what="a create after the outage")
            assert time.monotonic() - writable_at <= RECOVERY_S

            for run_id in (long["id"], after["id"]):
                await wait_until(lambda run_id=run_id: _status_is(run_of, run_id, "done"), within=10, what="runs done")
            assert (await run_of(long["id"]))["attempts"] == 1  # the outage re-executed nothing
        # Leaving in_process_worker awaited every background task: none had died.
        assert statuses[500] == 0, statuses
        assert statuses[503] > 0, statuses
    finally:
        await keys.dispose()


Create = Callable[..., Awaitable[httpx.Response]]
RunOf = Callable[[str], Awaitable[dict[str, object]]]


async def _status_is(run_of: RunOf, run_id: str, status: str) -> bool:
    return (await run_of(run_id))["status"] == status


async def _refused(create: Create) -> httpx.Response | None:
    response = await create(steps=0)
    return response if response.status_code == 503 else None


async def _created(create: Create) -> dict[str, object] | None:
    response = await create(steps=0)
    return response.json() if response.status_code == 201 else None  # type: ignore[no-any-return]


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200
