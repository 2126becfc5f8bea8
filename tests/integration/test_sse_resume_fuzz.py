"""SSE resume fuzzing (issue 9): many clients follow live runs on two API processes, each cut
off at random byte offsets and resuming with ``Last-Event-ID`` (often through the other
process, sometimes with a stream token as a browser would); every client's reassembled stream
must equal the stored log exactly: no event lost, repeated, reordered or altered.

A client keeps what a browser's ``EventSource`` keeps: only events completed by their blank
line, so a cut in the middle of a frame loses that frame, which the resume must send again.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from tests.api_support import ApiProcess, new_key
from tests.chaos.conftest import CHAOS_ENV, WorkerProcess
from tests.invariants import event_log_violations

RUNS = 8
CLIENTS_PER_RUN = 4
WITHIN_S = 90.0


@pytest.fixture(scope="module")
def apis(database_url: str) -> Iterator[list[ApiProcess]]:
    pair = [ApiProcess(database_url, env={"RUNQ_POLL_S": "0.5"}) for _ in range(2)]
    try:
        for api in pair:
            api.wait_ready()
        yield pair
    finally:
        for api in pair:
            api.stop()


@pytest.fixture
def worker(database_url: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    env = os.environ | CHAOS_ENV | {"RUNQ_DATABASE_URL": database_url}
    process = WorkerProcess(0, env=env, concurrency=RUNS, logs=tmp_path)
    try:
        yield process.wait_ready()
    finally:
        process.kill_all()


@dataclass(frozen=True)
class Frame:
    id: int
    event: str
    data: Any


class EventSourceParser:
    """Bytes in, complete events out, as the WHATWG EventSource algorithm dispatches them."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""
        self._fields: dict[str, str] = {}
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Frame]:
        self._buffer += self._decoder.decode(chunk)
        frames = []
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            line = line.removesuffix("\r")
            if not line:
                if self._data:
                    frames.append(
                        Frame(int(self._fields["id"]), self._fields.get("event", "message"), json.loads("\n".join(self._data)))
                    )
                self._fields, self._data = {}, []
            elif not line.startswith(":"):  # a comment (keep-alive) is skipped
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    self._data.append(value)
                else:
                    self._fields[name] = value
        return frames


@dataclass
class Client:
    """One follower of one run; ``frames`` is what it has seen, in order."""

    run_id: str
    rng: random.Random
    headers: dict[str, str]
    frames: list[Frame] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    async def follow(self, apis: list[httpx.AsyncClient]) -> None:
        await asyncio.sleep(self.rng.uniform(0, 0.5))
        api = self.rng.randrange(len(apis))
        while not await self._connect(apis[api]):
            self.stats["resumes"] += 1
            if self.rng.random() < 0.5:
                api = (api + 1) % len(apis)
                self.stats["resumes_elsewhere"] += 1
            await asyncio.sleep(self.rng.choice([0.0, 0.0, 0.05, 0.2]))

    async def _connect(self, client: httpx.AsyncClient) -> bool:
        """One connection, cut after a random number of bytes; True once the server ended it."""
        headers, params = dict(self.headers), {}
        if self.frames:
            headers["Last-Event-ID"] = str(self.frames[-1].id)
        if self.rng.random() < 0.2:  # a browser: no Authorization header, a stream token instead
            issued = await client.post(f"/runs/{self.run_id}/stream-token", headers=self.headers)
            headers.pop("Authorization")
            params["token"] = issued.json()["token"]
            self.stats["token_connections"] += 1
        budget = self.rng.choice([None, *(self.rng.randint(1, 600) for _ in range(3))])
        parser = EventSourceParser()
        async with client.stream("GET", f"/runs/{self.run_id}/events", headers=headers, params=params) as response:
            assert response.status_code == 200, await response.aread()
            async for chunk in response.aiter_raw():
                if budget is not None and len(chunk) >= budget:
                    self.frames += parser.feed(chunk[:budget])
                    self.stats["cuts"] += 1
                    return False
                if budget is not None:
                    budget -= len(chunk)
                self.frames += parser.feed(chunk)
        return True


async def test_resumed_streams_equal_the_stored_log(
    apis: list[ApiProcess], worker: WorkerProcess, engine: AsyncEngine, queue: Queue
) -> None:
    rng = random.Random(11)
    key = await new_key(engine, "fuzz")
    clients_http = [httpx.AsyncClient(base_url=api.base_url, timeout=30) for api in apis]
    try:
        run_ids = []
        for i in range(RUNS):
            body = {
                "agent": "demo",
                "input": {
                    "prompt": " ".join(f"word{n}" for n in range(rng.randint(5, 40))),
                    "steps": rng.randint(6, 14),
                    "step_s": rng.choice([0.03, 0.06, 0.1]),
                    "fail_attempts": 1 if i % 3 == 0 else 0,
                },
                "max_attempts": 3,
            }
            created = await clients_http[i % 2].post("/runs", json=body, headers=key)
            run_ids.append(created.json()["id"])
        clients = [
            Client(run_id, random.Random(rng.random()), dict(key))
            for run_id in run_ids
            for _ in range(CLIENTS_PER_RUN)
        ]
        async with asyncio.timeout(WITHIN_S):
            await asyncio.gather(*(client.follow(clients_http) for client in clients))
    finally:
        for http in clients_http:
            await http.aclose()

    stats: Counter[str] = Counter()
    for client in clients:
        stats.update(client.stats)
        stored = await queue.read_events(uuid.UUID(client.run_id), limit=1000)
        assert event_log_violations(stored, finished=True) == []
        expected = [Frame(e.seq, e.type, e.data) for e in stored]
        assert client.frames == expected, f"run {client.run_id}: {client.stats}"
    events = sum(len(c.frames) for c in clients)
    print(f"\n{len(clients)} clients, {events} events reassembled, {dict(stats)}")
    assert stats["cuts"] >= len(clients) and stats["resumes_elsewhere"] > 0 and stats["token_connections"] > 0
