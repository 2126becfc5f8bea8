"""Streaming across real API processes: resume without gap or duplicate, fan-out, replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from tests.api_support import (
    ApiProcess,
    Frame,
    RunDriver,
    create_run,
    new_key,
    sse_frames,
    wait_for,
)

STREAM_TIMEOUT_S = 20.0


async def events_of(frames: AsyncIterator[Frame], count: int) -> list[Frame]:
    """The next ``count`` event frames (keep-alives skipped)."""
    got: list[Frame] = []
    async with asyncio.timeout(STREAM_TIMEOUT_S):
        async for frame in frames:
            if frame.comment is None:
                got.append(frame)
                if len(got) == count:
                    return got
    raise AssertionError(f"the stream ended after {len(got)} of {count} events")


async def follow_to_end(
    base_url: str, run_id: str, headers: Mapping[str, str], params: Mapping[str, str] | None = None
) -> list[Frame]:
    """Every event frame until the server closes the stream."""
    async with (
        asyncio.timeout(STREAM_TIMEOUT_S),
        httpx.AsyncClient(base_url=base_url, timeout=STREAM_TIMEOUT_S) as client,
        client.stream("GET", f"/runs/{run_id}/events", headers=dict(headers), params=params) as response,
    ):
        assert response.status_code == 200
        return [f async for f in sse_frames(response) if f.comment is None]


async def test_resume_with_last_event_id_mid_run_loses_and_repeats_nothing(
    apis: tuple[ApiProcess, ApiProcess], engine: AsyncEngine, queue: Queue
) -> None:
    first, second = apis
    alice = await new_key(engine, "alice")
    async with httpx.AsyncClient(base_url=first.base_url, timeout=STREAM_TIMEOUT_S) as client:
        run = await create_run(client, alice)
        driver = RunDriver(queue)
        await driver.start()
        await driver.deltas("a", "b")
        async with client.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
            frames = sse_frames(response)
            before = await events_of(frames, 4)  # replayed: queued, started, a, b
            await driver.deltas("c")  # live, woken by NOTIFY
            before += await events_of(frames, 1)
        # The connection is gone; the run goes on.
        await driver.deltas("d", "e")

    resumed = asyncio.create_task(
        follow_to_end(second.base_url, run["id"], alice | {"Last-Event-ID": str(before[-1].id)})
    )
    await driver.deltas("f")
    last = await driver.complete({"text": "abcdef"})
    after = await resumed

    seqs = [f.id for f in before + after]
    assert seqs == list(range(1, last + 1))
    texts = [f.data["text"] for f in before + after if f.event == "message.delta"]
    assert texts == ["a", "b", "c", "d", "e", "f"]
    assert (after[-1].event, after[-1].data) == ("run.completed", {"output": {"text": "abcdef"}})


async def test_two_api_processes_stream_the_same_run(
    apis: tuple[ApiProcess, ApiProcess], engine: AsyncEngine, queue: Queue
) -> None:
    alice = await new_key(engine, "alice")
    async with httpx.AsyncClient(base_url=apis[0].base_url) as client:
        run = await create_run(client, alice)
    followers = [asyncio.create_task(follow_to_end(api.base_url, run["id"], alice)) for api in apis]

    async def both_attached() -> bool:
        async with httpx.AsyncClient(base_url=apis[0].base_url) as client:
            metrics = [(await client.get(f"{api.base_url}/metrics")).text for api in apis]
        return all("runq_sse_subscribers 1.0" in m for m in metrics)

    await wait_for(both_attached)
    driver = RunDriver(queue)
    await driver.start()
    for batch in range(5):
        await driver.deltas(*(f"{batch}.{i}" for i in range(4)))
    last = await driver.complete()

    seen = await asyncio.gather(*followers)
    for frames in seen:
        assert [f.id for f in frames] == list(range(1, last + 1))
        assert frames[-1].event == "run.completed"
    assert [(f.event, f.data) for f in seen[0]] == [(f.event, f.data) for f in seen[1]]


async def test_stream_opened_after_the_run_finished_replays_and_closes(
    apis: tuple[ApiProcess, ApiProcess], engine: AsyncEngine, queue: Queue
) -> None:
    alice = await new_key(engine, "alice")
    async with httpx.AsyncClient(base_url=apis[0].base_url) as client:
        run = await create_run(client, alice)
        driver = RunDriver(queue)
        await driver.start()
        await driver.deltas("x")
        last = await driver.complete()
        # A browser's EventSource: a token from one process, the stream from the other.
        token = (await client.post(f"/runs/{run['id']}/stream-token", headers=alice)).json()["token"]

    frames = await follow_to_end(apis[1].base_url, run["id"], {}, {"token": token})
    assert [f.id for f in frames] == list(range(1, last + 1))
    assert frames[-1].event == "run.completed"
    assert await follow_to_end(apis[0].base_url, run["id"], alice | {"Last-Event-ID": str(last)}) == []
