"""The process's one LISTEN connection: fan-out by run, reconnect after a drop, poll fallback."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.listener import EventHub
from app.db.url import asyncpg_dsn
from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import SECRET, InProcessServer, RunDriver, create_run, new_key, sse_frames


async def no_reads(cursors: object) -> list[None]:
    raise AssertionError("these tests only wake streams")


@pytest.fixture
async def hub(direct_database_url: str) -> AsyncIterator[EventHub[None]]:
    hub: EventHub[None] = EventHub(asyncpg_dsn(direct_database_url), no_reads, backoff_min_s=0.05)
    await hub.start()
    async with asyncio.timeout(10):
        await hub.connected.wait()
    yield hub
    await hub.stop()


async def notify(engine: AsyncEngine, payload: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_notify('runq_events', :payload)"), {"payload": payload})


async def test_notify_wakes_only_that_runs_subscribers(hub: EventHub[None], engine: AsyncEngine) -> None:
    watched, other = uuid.uuid4(), uuid.uuid4()
    with hub.subscribe(watched) as first, hub.subscribe(watched) as second, hub.subscribe(other) as bystander:
        await notify(engine, f"{watched}:7")
        async with asyncio.timeout(10):
            await first.wait()
            await second.wait()
        assert not bystander.is_set()


async def test_reconnects_after_the_connection_is_killed_and_wakes_everyone(
    hub: EventHub[None], engine: AsyncEngine
) -> None:
    run_id = uuid.uuid4()
    with hub.subscribe(run_id) as wake:
        async with engine.begin() as conn:
            killed = await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'runq-api-listen' AND datname = current_database()"
                )
            )
            assert killed.all()
        async with asyncio.timeout(10):
            await wake.wait()  # woken on reconnect: it may have missed notifications while deaf
        wake.clear()
        await notify(engine, f"{run_id}:1")
        async with asyncio.timeout(10):
            await wake.wait()


async def test_stream_falls_back_to_polling_without_listen(
    database_url: str, engine: AsyncEngine, queue: Queue
) -> None:
    app = create_app(Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2))
    alice = await new_key(engine, "alice")
    server = InProcessServer(app)
    async with server, httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        await app.state.runtime.hub.stop()  # deaf: only the poll can find new events
        run = await create_run(client, alice)
        driver = RunDriver(queue)
        await driver.start()
        async with client.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
            frames = sse_frames(response)
            last = await driver.complete()
            async with asyncio.timeout(10):
                seqs = [f.id async for f in frames if f.comment is None]
    assert seqs == list(range(1, last + 1))
