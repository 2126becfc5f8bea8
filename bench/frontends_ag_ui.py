"""What the AG-UI translation costs the API: CPU per frame and per runq event over
``GET /ag-ui/runs/{id}/events`` against runq's native SSE (``GET /runs/{id}/events``) for the
same finished runs, rounds taking turns so both see the same machine.

The runs are written through the queue (a streamed prompt, then ``steps`` tool calls and
results), so no worker competes for the CPU: native SSE sends each stored event's JSON text as
it is, AG-UI decodes it, translates it and encodes the result. The API process's CPU (user +
system) is read around each round.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from app.db.engine import create_engine
from app.domain import Finish
from app.queue import NewRun, Queue
from bench.api_server import TENANT, Api, running_api
from bench.http import connection
from bench.procs import APP_NAME
from bench.server import BenchServer

PATHS = {"native": "/runs/{id}/events", "ag_ui": "/ag-ui/runs/{id}/events"}


async def compare(server: BenchServer, *, runs: int, steps: int, rounds: int) -> dict[str, Any]:
    """``rounds`` replays of ``runs`` finished runs of ``steps`` tool steps each, per path."""
    async with server.database("frontends_ag_ui") as url, running_api(url) as api:
        run_ids, events = await _finished_runs(url, runs=runs, steps=steps)
        per_frame: dict[str, list[float]] = {path: [] for path in PATHS}
        per_event: dict[str, list[float]] = {path: [] for path in PATHS}
        for round_ in range(rounds + 1):  # the first round of each warms up and is not counted
            for name, path in PATHS.items():
                before = api.child.cpu_s()
                frames = sum(await asyncio.gather(*(_replay(api, path.format(id=r)) for r in run_ids)))
                used_us = (api.child.cpu_s() - before) * 1e6
                if round_:
                    per_frame[name].append(used_us / frames)
                    per_event[name].append(used_us / (events * runs))
    out: dict[str, Any] = {"shape": {"runs": runs, "events_per_run": events, "rounds": rounds}}
    for name in PATHS:
        out[name] = {
            "cpu_us_per_frame": round(statistics.median(per_frame[name]), 1),
            "cpu_us_per_event": round(statistics.median(per_event[name]), 1),
        }
    # None where the native side measured no CPU at all: the smoke profile's few frames can fit
    # in one /proc tick (10 ms), which is not a ratio
    for ratio, per in (("ratio_per_event", "cpu_us_per_event"), ("ratio_per_frame", "cpu_us_per_frame")):
        native, ag_ui = (out[name][per] for name in PATHS)
        out[ratio] = round(ag_ui / native, 2) if native else None
    return out


async def _finished_runs(url: str, *, runs: int, steps: int) -> tuple[list[str], int]:
    """Runs of the bench's tenant, each with a streamed prompt and ``steps`` tool steps, done."""
    engine = create_engine(url, pool_size=1, application_name=APP_NAME)
    ids: list[str] = []
    try:
        queue = Queue(engine, lease_s=3600)
        for _ in range(runs):
            await queue.enqueue(NewRun(tenant_id=TENANT, agent="demo", input={"prompt": "a prompt"}))
            (claim,) = await queue.claim_batch(worker_id="bench:ag-ui", limit=1)
            ref = {"run_id": claim.run.id, "lease_id": claim.lease_id}
            words = [("message.delta", {"text": w}) for w in ("a ", "few ", "words ", "to ", "stream")]
            await queue.append_events(**ref, events=[*words, ("message.completed", {"text": "a few words to stream"})])
            for step in range(1, steps + 1):
                call = {"tool_call_id": f"step_{step}", "name": "sleep"}
                await queue.append_events(
                    **ref,
                    events=[
                        ("tool.call", call | {"arguments": {"seconds": 0.01}}),
                        ("tool.result", call | {"output": f"step {step} of {steps} done", "is_error": False}),
                    ],
                )
            done = await queue.finish(**ref, finish=Finish.done({"text": "a few words to stream"}))
            ids.append(str(claim.run.id))
        return ids, done.last_event_seq
    finally:
        await engine.dispose()


async def _replay(api: Api, path: str) -> int:
    frames = 0
    async with connection("127.0.0.1", api.port) as conn:
        async for _ in conn.frames(path, headers=api.auth):
            frames += 1
    return frames
