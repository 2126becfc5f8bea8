"""The README walkthrough against real processes: two APIs and a worker running the demo agent."""

from __future__ import annotations

import asyncio
import subprocess

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api_support import ApiProcess, create_run, new_key, sse_frames, wait_for
from tests.e2e.test_api_streaming import STREAM_TIMEOUT_S, events_of, follow_to_end


async def test_demo_run_streams_resumes_and_another_is_stopped(
    apis: tuple[ApiProcess, ApiProcess], worker: subprocess.Popen[bytes], engine: AsyncEngine
) -> None:
    alice = await new_key(engine, "alice")
    first, second = apis
    async with httpx.AsyncClient(base_url=first.base_url, timeout=STREAM_TIMEOUT_S) as client:
        run = await create_run(client, alice, input={"prompt": "hello", "steps": 4, "step_s": 0.2})
        async with client.stream("GET", f"/runs/{run['id']}/events", headers=alice) as response:
            frames = sse_frames(response)
            before = await events_of(frames, 3)
        after = await follow_to_end(second.base_url, run["id"], alice | {"Last-Event-ID": str(before[-1].id)})
        events = before + after
        assert [f.id for f in events] == list(range(1, len(events) + 1))
        assert events[-1].event == "run.completed"
        assert events[-1].data == {"output": {"text": "hello", "steps": 4}}
        assert [f.event for f in events].count("tool.call") == 4

        long = await create_run(client, alice, input={"steps": 500, "step_s": 0.2})

        async def leased() -> bool:
            return (await client.get(f"/runs/{long['id']}", headers=alice)).json()["status"] == "leased"

        await wait_for(leased, within=STREAM_TIMEOUT_S)
        follower = asyncio.create_task(follow_to_end(second.base_url, long["id"], alice))
        stop = await client.post(f"/runs/{long['id']}/cancel", json={"note": "enough"}, headers=alice)
        assert stop.status_code == 202
        frames_seen = await follower
        assert (frames_seen[-1].event, frames_seen[-1].data) == ("run.cancelled", {"reason": "user"})
        shown = (await client.get(f"/runs/{long['id']}", headers=alice)).json()
        assert (shown["status"], shown["cancel_reason"]) == ("cancelled", "user")
