"""Live SSE over a real (in-process) uvicorn: presence, abandonment, keep-alive, requeue."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import (
    SECRET,
    Frame,
    InProcessServer,
    RunDriver,
    create_run,
    sse_frames,
    wait_for,
)


@pytest.fixture
async def http(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a real server whose streams ping every 0.2 s and refresh presence every 0.2 s."""
    settings = Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2, presence_ttl_s=0.6)
    server = InProcessServer(create_app(settings, sse_ping_s=0.2))
    async with server, httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        yield client


async def next_event(frames: AsyncIterator[Frame]) -> Frame:
    """The next frame that is an event (keep-alive comments skipped)."""
    async with asyncio.timeout(10):
        async for frame in frames:
            if frame.comment is None:
                return frame
    raise AssertionError("the stream ended")


async def subscribers(engine: AsyncEngine, run_id: str) -> int:
    async with engine.connect() as conn:
        query = text("SELECT count(*) FROM run_subscribers WHERE run_id = :id")
        return int((await conn.execute(query, {"id": run_id})).scalar_one())


async def grace_passed(engine: AsyncEngine, run_id: str) -> None:
    """Move the run's clock back a minute: created and left that long ago (no sleeping)."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE agent_runs SET created_at = created_at - interval '1 minute',"
                " detached_at = detached_at - interval '1 minute' WHERE id = :id"
            ),
            {"id": run_id},
        )


async def test_abandoned_interactive_run_is_cancelled_after_grace(
    http: httpx.AsyncClient, engine: AsyncEngine, queue: Queue, alice: dict[str, str]
) -> None:
    run = await create_run(http, alice, on_disconnect="cancel", disconnect_grace_s=30)
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
        # Held in a name: an unreferenced frame generator is finalised (aclose) by the event
        # loop at its next turn, which closes the stream and detaches the subscriber under us.
        frames = sse_frames(response)
        assert (await next_event(frames)).event == "run.queued"
        assert await subscribers(engine, run["id"]) == 1
    await wait_for(lambda: _detached(engine, run["id"]))

    assert await queue.cancel_abandoned() == []  # closing the stream alone cancels nothing
    await grace_passed(engine, run["id"])
    assert [r.id for r in await queue.cancel_abandoned()] == [uuid.UUID(run["id"])]
    shown = (await http.get(f"/runs/{run['id']}", headers=alice)).json()
    assert (shown["status"], shown["cancel_reason"]) == ("cancelled", "abandoned")


async def _detached(engine: AsyncEngine, run_id: str) -> bool:
    async with engine.connect() as conn:
        query = text(
            "SELECT detached_at IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM run_subscribers WHERE run_id = :id) FROM agent_runs WHERE id = :id"
        )
        return bool((await conn.execute(query, {"id": run_id})).scalar_one())


async def test_resubscribe_within_grace_continues_seamlessly(
    http: httpx.AsyncClient, engine: AsyncEngine, queue: Queue, alice: dict[str, str]
) -> None:
    run = await create_run(http, alice, on_disconnect="cancel", disconnect_grace_s=30)
    driver = RunDriver(queue)
    await driver.start()
    await driver.deltas("a", "b")
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
        frames = sse_frames(response)
        seen = [(await next_event(frames)).id for _ in range(4)]
    assert seen == [1, 2, 3, 4]
    await wait_for(lambda: _detached(engine, run["id"]))

    headers = alice | {"Last-Event-ID": "4"}
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=headers) as response:
        frames = sse_frames(response)
        await wait_for(lambda: subscribers(engine, run["id"]))
        await grace_passed(engine, run["id"])  # the old detach is long ago; a subscriber is here now
        assert await queue.cancel_abandoned() == []
        await driver.deltas("c")
        last = await driver.complete()
        rest = [await next_event(frames) for _ in range(2)]
        async with asyncio.timeout(10):
            assert [f async for f in frames if f.comment is None] == []  # closed after the terminal event
    assert [f.id for f in rest] == [5, last]
    assert [f.event for f in rest] == ["message.delta", "run.completed"]
    assert (await http.get(f"/runs/{run['id']}", headers=alice)).json()["status"] == "done"


async def test_background_run_is_never_auto_cancelled(
    http: httpx.AsyncClient, engine: AsyncEngine, queue: Queue, alice: dict[str, str]
) -> None:
    watched = await create_run(http, alice, disconnect_grace_s=0)
    unwatched = await create_run(http, alice, disconnect_grace_s=0)
    async with http.stream("GET", f"/runs/{watched['id']}/events", headers=alice) as response:
        await next_event(sse_frames(response))
    await wait_for(lambda: _detached(engine, watched["id"]))
    for run in (watched, unwatched):
        await grace_passed(engine, run["id"])
    assert await queue.cancel_abandoned() == []
    for run in (watched, unwatched):
        assert (await http.get(f"/runs/{run['id']}", headers=alice)).json()["status"] == "pending"


async def test_open_stream_keeps_its_presence_fresh(
    http: httpx.AsyncClient, engine: AsyncEngine, alice: dict[str, str]
) -> None:
    run = await create_run(http, alice, on_disconnect="cancel")
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
        frames = sse_frames(response)  # kept referenced: a collected generator closes the connection
        await next_event(frames)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE run_subscribers SET seen_at = now() - interval '1 hour'"))

        async def refreshed() -> bool:
            async with engine.connect() as conn:
                query = text("SELECT bool_and(seen_at > now() - interval '1 minute') FROM run_subscribers")
                return bool((await conn.execute(query)).scalar())

        await wait_for(refreshed)
    await wait_for(lambda: _detached(engine, run["id"]))


async def test_keep_alive_comments_while_idle(http: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(http, alice)
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
        frames = sse_frames(response)
        assert (await next_event(frames)).event == "run.queued"
        async with asyncio.timeout(10):
            comment = await anext(f async for f in frames if f.comment is not None)
    assert comment.comment is not None and comment.comment.startswith("ping")


async def test_keep_alive_events_when_asked_for(http: httpx.AsyncClient, alice: dict[str, str]) -> None:
    """``?keepalive=event`` (what /client.js asks for): a ``ping`` event without an id, so a
    browser sees it and a reader's last event id stays the last seq."""
    run = await create_run(http, alice)
    url = f"/runs/{run['id']}/events?keepalive=event"
    async with http.stream("GET", url, headers=alice) as response:
        frames = sse_frames(response)
        assert (await next_event(frames)).event == "run.queued"
        async with asyncio.timeout(10):
            ping = await next_event(frames)
    assert (ping.event, ping.data, ping.id, ping.comment) == ("ping", {}, None, None)


async def test_requeue_after_terminal_keeps_the_stream_open(
    http: httpx.AsyncClient, queue: Queue, alice: dict[str, str]
) -> None:
    run = await create_run(http, alice)
    first = RunDriver(queue)
    await first.start()
    terminal = await first.fail()
    await queue.requeue(uuid.UUID(run["id"]))

    headers = alice | {"Last-Event-ID": str(terminal)}
    async with http.stream("GET", f"/runs/{run['id']}/events", headers=headers) as response:
        frames = sse_frames(response)
        assert (await next_event(frames)).event == "run.queued"
        second = RunDriver(queue)
        await second.start()
        last = await second.complete()
        tail = [await next_event(frames) for _ in range(2)]
    assert [(f.id, f.event) for f in tail] == [(last - 1, "run.started"), (last, "run.completed")]
