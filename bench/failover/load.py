"""The load of a failover round: clients creating keyed runs, and SSE followers of some of them.

A creator retries a create that got no answer or a 503 with the same ``Idempotency-Key``, on
the other API, until one acknowledges it (201, or 200 for a key already stored): what a
careful client does, and what makes "acknowledged but lost" a fair count. A follower reads a
run's stream to its terminal event, resuming with ``Last-Event-ID`` on the other API whenever
a connection drops.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx

from bench.failover.figures import TERMINAL, Stream

RUN = {"agent": "demo", "input": {"steps": 6, "step_s": 0.25}}
RETRY_S = 0.2
REQUEST_TIMEOUT_S = 30.0


@dataclass
class Load:
    apis: list[str]
    key: str
    statuses: Counter[int] = field(default_factory=Counter)
    acknowledged: dict[str, float] = field(default_factory=dict)  # run id -> time.time() of its 201/200
    streams: list[Stream] = field(default_factory=list)
    failed_since: float | None = None  # the first refused create of the current outage
    _followers: set[asyncio.Task[None]] = field(default_factory=set)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def run(self, *, creators: int, every_s: float, follow_every: int) -> None:
        """Create and follow until :meth:`stop`; then let the followers read to the end."""
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=REQUEST_TIMEOUT_S)
        async with httpx.AsyncClient(timeout=timeout) as client:
            await asyncio.gather(*(self._create(client, n, every_s, follow_every) for n in range(creators)))
            if self._followers:
                await asyncio.wait(self._followers, timeout=120)

    def stop(self) -> None:
        self._stopping.set()

    async def _create(self, client: httpx.AsyncClient, n: int, every_s: float, follow_every: int) -> None:
        apis = itertools.cycle(self.apis[n % len(self.apis):] + self.apis[: n % len(self.apis)])
        for made in itertools.count():
            if self._stopping.is_set():
                return
            run_id = await self._create_one(client, apis, idempotency_key=str(uuid.uuid4()))
            if made % follow_every == 0:
                task = asyncio.create_task(self._follow(client, run_id, apis))
                self._followers.add(task)
                task.add_done_callback(self._followers.discard)
            await asyncio.sleep(every_s)

    async def _create_one(self, client: httpx.AsyncClient, apis: itertools.cycle[str], *, idempotency_key: str) -> str:
        headers = self.headers | {"Idempotency-Key": idempotency_key}
        while True:
            try:
                response = await client.post(f"{next(apis)}/runs", json=RUN, headers=headers)
            except httpx.HTTPError:
                self.statuses[0] += 1  # no answer (0): the API itself was gone or timed out
            else:
                self.statuses[response.status_code] += 1
                if response.status_code in (200, 201):
                    run_id = str(response.json()["id"])
                    self.acknowledged[run_id] = time.time()
                    return run_id
            self.failed_since = self.failed_since or time.time()
            await asyncio.sleep(RETRY_S)

    async def _follow(self, client: httpx.AsyncClient, run_id: str, apis: itertools.cycle[str]) -> None:
        stream = Stream(run_id)
        self.streams.append(stream)
        while not stream.finished:
            stream.connections += 1
            headers = self.headers | {"Accept": "text/event-stream"}
            if stream.seen:
                headers["Last-Event-ID"] = str(stream.seen[-1][0])
            try:
                async with client.stream("GET", f"{next(apis)}/runs/{run_id}/events", headers=headers) as response:
                    self.statuses[response.status_code] += 1
                    if response.status_code == 200:
                        await _read_frames(response, stream)
            except httpx.HTTPError:
                pass  # dropped: resume after the last seq seen
            if not stream.finished:
                await asyncio.sleep(RETRY_S)


async def _read_frames(response: httpx.Response, stream: Stream) -> None:
    seq: int | None = None
    kind = ""
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line == "" and seq is not None:
            stream.seen.append((seq, kind))
            stream.arrivals.append(time.time())
            seq = None
            if kind in TERMINAL:
                return
