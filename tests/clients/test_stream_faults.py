"""Streams cut at random byte offsets: every event arrives exactly once, in order.

The proxy gives each connection a random budget of bytes from the server, so connections end
inside headers, chunk framing, SSE fields and UTF-8 characters; the client resumes after the last
seq it yielded. Checked against the stored log (the JSON page, read directly): no gap, no
duplicate, nothing after the terminal event.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from typing import Any

import httpx
from runq_client import AsyncClient, Client, Event, RetryPolicy
from runq_client.calls import SILENCE_TIMEOUT_S

from tests.api_support import ApiProcess
from tests.clients.faultproxy import FaultProxy
from tests.worker_support import wait_until

RUNS = 200
MIN_CUTS = 1000
FOLLOWERS = 50  # streams open at once
# Multi-byte text, so that some cuts fall inside a character.
DEMO = {"prompt": "zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich ✓", "steps": 3, "step_s": 0.05}
# Enough tries that a run of cuts before the first byte (more of them on a loaded machine)
# never exhausts them; the test counts gaps and duplicates, not tries.
NO_WAIT = RetryPolicy(max_retries=60, backoff_s=0.01, max_backoff_s=0.1)


def budgets(seed: int, most: int = 700) -> Any:
    rng = random.Random(seed)
    return lambda: rng.randint(1, most)


async def stored(client: httpx.AsyncClient, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    response = await client.get(f"/runs/{run_id}/events", params={"limit": 1000})
    return [(e["seq"], e["type"], e["data"]) for e in response.json()["items"]]


async def running(client: AsyncClient, run_id: str) -> bool:
    return (await client.runs.get(run_id)).status == "leased"


def check(events: list[Event], log: list[tuple[int, str, dict[str, Any]]]) -> None:
    assert [(e.seq, e.type, e.data) for e in events] == log
    assert log[-1][1] == "run.completed" and [seq for seq, *_ in log] == list(range(1, len(log) + 1))


async def test_200_runs_followed_through_random_cuts(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
    async with AsyncClient(api.base_url, api_key) as direct, httpx.AsyncClient(base_url=api.base_url, headers=headers) as raw:
        runs = await asyncio.gather(*(direct.runs.create("demo", DEMO) for _ in range(RUNS)))
        with FaultProxy(api.port, budgets(20)) as proxy:
            async with AsyncClient(proxy.base_url, api_key, retry=NO_WAIT) as cut:
                slots = asyncio.Semaphore(FOLLOWERS)

                async def follow(run_id: str) -> list[Event]:
                    async with slots:
                        return [event async for event in cut.runs.stream(run_id)]

                followed = await asyncio.gather(*(follow(run.id) for run in runs))
            cuts = proxy.cuts
        logs = await asyncio.gather(*(stored(raw, run.id) for run in runs))
    for events, log in zip(followed, logs, strict=True):
        check(events, log)
    print(f"{RUNS} runs, {sum(len(e) for e in followed)} events, {cuts} cuts")
    assert cuts >= MIN_CUTS


def test_sync_stream_through_random_cuts(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    with Client(api.base_url, api_key) as direct, FaultProxy(api.port, budgets(7, most=2500)) as proxy:
        runs = [direct.runs.create("demo", DEMO) for _ in range(4)]
        with Client(proxy.base_url, api_key, retry=NO_WAIT) as cut:
            for run in runs:
                events = list(cut.runs.stream(run.id))
                assert cut.runs.wait(run.id, timeout=30).status == "done"
                check(events, [(e.seq, e.type, e.data) for e in direct.runs.events(run.id, limit=1000).items])
        assert proxy.cuts >= 5


async def test_a_stalled_stream_is_resumed_after_the_silence_timeout(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    """The first connection goes silent after a few events while staying open (the proxy swallows
    the rest, keep-alives too): the client gives up on it after ``silence_timeout`` and resumes
    after the last seq it yielded, on a connection that works. (Followed once the run is running:
    the wait for a worker is longer than this short timeout, and has no keep-alive this often.)"""
    budgets = iter([600])  # the headers and a few events
    async with AsyncClient(api.base_url, api_key) as direct:
        run = await direct.runs.create("demo", {"prompt": "a stall in the middle", "steps": 10, "step_s": 0.3})
        await wait_until(lambda: running(direct, run.id), within=30, what="the run to start")
        with FaultProxy(api.port, lambda: next(budgets, None), stall=True) as proxy:
            async with AsyncClient(proxy.base_url, api_key, silence_timeout=1.0, retry=NO_WAIT) as client:
                started = time.monotonic()
                events = [event async for event in client.runs.stream(run.id)]
                took = time.monotonic() - started
            assert (proxy.stalls, proxy.connections) == (1, 2)
        log = [(e.seq, e.type, e.data) for e in (await direct.runs.events(run.id, limit=1000)).items]
    check(events, log)
    assert took < SILENCE_TIMEOUT_S / 2  # the short timeout given, not the default
