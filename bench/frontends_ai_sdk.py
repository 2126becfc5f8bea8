"""What the AI SDK translation costs the API: CPU per streamed event over ``POST /ai-sdk/chat``
against runq's native SSE (``POST /threads/{id}/runs`` + ``GET /runs/{id}/events``) for the same
live demo runs, in one process, rounds taking turns so both see the same machine; and the time
to the last replayed byte when a reloaded page resumes a long answer in flight.

Both paths create a run of a thread and stream it live to its end; they differ only in what the
API sends: native SSE writes each stored event's JSON text as it is, the AI SDK stream decodes
it, maps it to chunks and encodes those. The API process's CPU (user + system) is read around
each round and divided by the runq events (and the frames) the round streamed.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from app.db.engine import create_engine
from app.queue import Queue
from bench.api_server import Api, running_api
from bench.http import connection, json_body
from bench.procs import APP_NAME, children, wait_for_workers
from bench.server import BenchServer
from bench.throughput import WORKER_READY, worker_argv, worker_env

PATHS = ("native", "ai_sdk")


async def compare(server: BenchServer, *, streams: int, steps: int, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of each path, ``streams`` concurrent runs of ``steps`` demo steps each."""
    async with (
        server.database("frontends_ai_sdk") as url,
        running_api(url) as api,
        children([worker_argv(streams)], env=worker_env(url)) as procs,
    ):
        await wait_for_workers(url, 1, sessions=WORKER_READY, watch=procs)
        threads = [await _thread(api) for _ in range(streams)]
        per_event: dict[str, list[float]] = {path: [] for path in PATHS}
        per_frame: dict[str, list[float]] = {path: [] for path in PATHS}
        for round_ in range(rounds + 1):  # the first round of each warms up and is not counted
            for path in PATHS:
                before = api.child.cpu_s()
                counts = await asyncio.gather(*(_stream(api, path, t, steps) for t in threads))
                used_us = (api.child.cpu_s() - before) * 1e6
                if round_:
                    per_event[path].append(used_us / sum(events for events, _ in counts))
                    per_frame[path].append(used_us / sum(frames for _, frames in counts))
    out: dict[str, Any] = {"shape": {"streams": streams, "steps": steps, "rounds": rounds}}
    for path in PATHS:
        out[path] = {"cpu_us_per_event": _median(per_event[path]), "cpu_us_per_frame": _median(per_frame[path])}
        out[path]["rounds_us_per_event"] = [round(v, 1) for v in per_event[path]]
    native, ai_sdk = (out[p]["cpu_us_per_event"] for p in PATHS)
    out["ratio_per_event"] = round(ai_sdk / native, 2) if native else None
    return out


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


async def _thread(api: Api) -> str:
    async with connection("127.0.0.1", api.port) as conn:
        status, body = await conn.request("POST", "/threads", headers=api.auth | {"Content-Type": "application/json"}, body=b"{}")
    if status != 201:
        raise RuntimeError(f"POST /threads: {status} {body[:200]!r}")
    return str(json.loads(body)["id"])


async def _stream(api: Api, path: str, thread_id: str, steps: int) -> tuple[int, int]:
    """Create one run on the thread and stream it to its end: (runq events, frames received)."""
    run_input = {"prompt": "a prompt of a few words to stream", "steps": steps, "step_s": 0.005}
    last_seq = frames = 0
    async with connection("127.0.0.1", api.port) as conn:
        if path == "native":
            json_headers = api.auth | {"Content-Type": "application/json"}
            status, body = await conn.request(
                "POST", f"/threads/{thread_id}/runs", headers=json_headers, body=json_body({"agent": "demo", "input": run_input})
            )
            if status != 201:
                raise RuntimeError(f"POST /threads/{{id}}/runs: {status} {body[:200]!r}")
            run_id = json.loads(body)["id"]
            stream = conn.frames(f"/runs/{run_id}/events", headers=api.auth)
        else:
            message = {"id": "m", "role": "user", "parts": [{"type": "text", "text": run_input["prompt"]}]}
            chat = {"id": thread_id, "messages": [message], "agent": "demo", "input": run_input}
            stream = conn.frames("/ai-sdk/chat", headers=api.auth, method="POST", body=json_body(chat))
        async for frame in stream:
            frames += 1
            last_seq = max(last_seq, frame.seq)
    return last_seq, frames


async def resume(server: BenchServer, *, events: int, rounds: int) -> dict[str, Any]:
    """A run in flight with ``events`` stored deltas (held by the bench's own claim, so nothing
    else writes): the time from opening the stream to its last stored event's frame, over
    ``GET /ai-sdk/chat/{id}/stream`` (what ``useChat`` calls after a reload) and over
    ``GET /runs/{id}/events``, taking turns."""
    async with server.database("frontends_ai_sdk_resume") as url, running_api(url) as api:
        thread_id = await _thread(api)
        async with connection("127.0.0.1", api.port) as conn:
            status, body = await conn.request(
                "POST", f"/threads/{thread_id}/runs", headers=api.auth | {"Content-Type": "application/json"},
                body=json_body({"agent": "demo", "input": {"prompt": "long"}}),
            )  # fmt: skip
        if status != 201:
            raise RuntimeError(f"POST /threads/{{id}}/runs: {status} {body[:200]!r}")
        engine = create_engine(url, pool_size=1, application_name=APP_NAME)
        try:
            queue = Queue(engine, lease_s=3600)
            (claim,) = await queue.claim_batch(worker_id="bench:resume", limit=1)
            last = 0
            for start in range(0, events, 500):
                batch = [("message.delta", {"text": f"word{n} "}) for n in range(start, min(start + 500, events))]
                last = await queue.append_events(run_id=claim.run.id, lease_id=claim.lease_id, events=batch)
        finally:
            await engine.dispose()
        paths = {"ai_sdk": f"/ai-sdk/chat/{thread_id}/stream", "native": f"/runs/{claim.run.id}/events"}
        seconds: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, path in paths.items():
                started = time.perf_counter()
                async with connection("127.0.0.1", api.port) as conn:
                    async for frame in conn.frames(path, headers=api.auth):
                        if frame.seq >= last:
                            break
                seconds[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {"events": last, "rounds": rounds}
    for name in paths:
        out[name] = {"last_byte_ms": round(statistics.median(seconds[name]) * 1000, 1)}
    return out
