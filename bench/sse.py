"""SSE fan-out: 1,000 subscribers (100 live runs x 10) on one API process.

The workers start first and wait idle (their start-up is not delivery); the runs are stored
held back, every subscriber connects and receives its run's replayed ``run.queued``, and then
one statement releases all runs at once, which the workers claim and run live. Latency is event commit → frame
received: the commit timestamp PostgreSQL recorded for the event's transaction
(``track_commit_timestamp``, which the bench turns on for its embedded server; on a server
without it, the event's ``created_at``, its transaction's start, so the figure errs high)
against ``time.time()`` when the frame's chunk arrived; one host, one clock. The API's resident memory is sampled throughout.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from app.db.engine import create_engine
from app.queue import Queue
from bench.api_server import TENANT, Api, running_api
from bench.http import connection
from bench.procs import APP_NAME, arriving, children, connect, wait_for, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary
from bench.throughput import WORKER_READY, worker_argv, worker_env

HELD_S = 3600.0
RELEASE = (
    "WITH released AS (UPDATE agent_runs SET available_at = now(), queue_rank = now()"
    " WHERE id = $1 AND status = 'pending' RETURNING id) SELECT count(*), pg_notify('runq_runs', '') FROM released"
)

Receipt = tuple[uuid.UUID, int, float]


async def fan_out(
    server: BenchServer,
    *,
    runs: int = 100,
    per_run: int = 10,
    steps: int = 10,
    step_s: float = 0.5,
    workers: int = 2,
    lockstep: bool = False,
) -> dict[str, Any]:
    """``runs`` demo runs of ``steps`` steps (a tool.call and a tool.result per step), released
    one by one over a step, or all in one statement (``lockstep``: the worst case)."""
    concurrency = -(-runs // workers)
    async with (
        server.database("sse") as url,
        running_api(url) as api,
        children([worker_argv(concurrency)] * workers, env=worker_env(url)) as procs,
    ):
        await wait_for_workers(url, workers, sessions=WORKER_READY, watch=procs)
        engine = create_engine(url, pool_size=1, application_name=APP_NAME)
        try:
            await _warm_up(Queue(engine), url, runs=runs, steps=steps, watch=procs)
            ids = await Queue(engine).enqueue_many(
                tenant_id=TENANT,
                agent="demo",
                inputs=[{"steps": steps, "step_s": step_s}] * runs,
                delay_s=HELD_S,
            )
        finally:
            await engine.dispose()
        receipts: list[Receipt] = []
        replayed: list[uuid.UUID] = []
        streams: list[asyncio.Task[tuple[uuid.UUID, int]]] = []
        rss: list[float] = []
        sampler = asyncio.create_task(_sample_rss(api, rss))
        async def all_replayed() -> bool:
            for task in streams:
                if task.done():
                    task.result()  # a stream that ended before its run did: raise why
            return len(replayed) == len(streams)

        try:
            connect_started = time.monotonic()
            # Subscribers arrive in waves of one stream per run, as viewers do, not as one
            # burst of 1,000 connects: what is measured is delivery, not a thundering herd.
            for _ in range(per_run):
                streams.extend(asyncio.create_task(_subscribe(api, i, receipts, replayed)) for i in ids)
                await wait_for(all_replayed, timeout_s=120, what="every stream's replay", every_s=0.02)
            connect_s = time.monotonic() - connect_started
            await release_held(url, ids, over_s=0.0 if lockstep else step_s)
            done, _ = await asyncio.wait(streams, timeout=steps * step_s + 120)
            for child in procs:
                child.check()
            if len(done) < len(streams):
                raise TimeoutError(f"{len(streams) - len(done)} streams did not end")
            ended = [task.result() for task in done]
            rss_now, rss_peak = api.rss_mb()
        finally:
            sampler.cancel()
            for task in streams:
                task.cancel()
        async with connect(url) as conn:
            # The commit itself where the server records it; else the transaction's now().
            by_commit = await conn.fetchval("SHOW track_commit_timestamp") == "on"
            at = "pg_xact_commit_timestamp(xmin)" if by_commit else "created_at"
            rows = await conn.fetch(f"SELECT run_id, seq, extract(epoch FROM {at}) AS at FROM run_events")
    committed = {(r["run_id"], r["seq"]): float(r["at"]) for r in rows}
    last_seq: dict[uuid.UUID, int] = {}
    for run_id, seq in committed:
        last_seq[run_id] = max(seq, last_seq.get(run_id, 0))
    live = [(run_id, seq, at) for run_id, seq, at in receipts if seq > 1]
    latencies = [at - committed[(run_id, seq)] for run_id, seq, at in live]
    span = max(at for *_, at in live) - min(at for *_, at in live)
    expected = runs * per_run * (2 * steps + 3)
    return {
        "subscribers": runs * per_run,
        "release": "lock-step" if lockstep else f"staggered over {step_s} s",
        "runs": runs,
        "events_written": len(committed),
        "frames_received": len(receipts),
        "frames_expected": expected,
        "streams_ended_early": sum(1 for run_id, seq in ended if seq < last_seq[run_id]),
        "latency": summary(latencies),
        "latency_from": "commit timestamp" if by_commit else "transaction start (now())",
        "events_per_s_delivered": round(len(live) / span, 1) if span else None,
        "connect_s": round(connect_s, 2),
        "api_rss_mb": round(max(rss, default=rss_now), 1),
        "api_peak_rss_mb": round(rss_peak, 1),
    }


async def release_held(url: str, ids: list[uuid.UUID], *, over_s: float) -> None:
    """Make the held runs claimable one by one, evenly over ``over_s`` (one step)."""
    async with connect(url) as conn:
        async for i in arriving(len(ids), over_s=over_s):
            run_id = ids[i]
            if await conn.fetchval(RELEASE, run_id) != 1:
                raise RuntimeError(f"run {run_id} was not held")


async def _warm_up(queue: Queue, url: str, *, runs: int, steps: int, watch: list[Any]) -> None:
    """One round of as many runs as will be measured, unwatched: the workers' connection pools
    grow to their working size here (a hundred backends forked at once is a start-up cost,
    not delivery)."""
    await queue.enqueue_many(tenant_id="warm-up", agent="demo", inputs=[{"steps": steps, "step_s": 0.05}] * runs)

    async def finished() -> bool:
        async with connect(url) as conn:
            return bool(await conn.fetchval("SELECT count(*) = 0 FROM agent_runs WHERE status IN ('pending', 'leased')"))

    await wait_for(finished, timeout_s=120, what="the warm-up runs", every_s=0.1, watch=watch)


async def _subscribe(
    api: Api, run_id: uuid.UUID, receipts: list[Receipt], replayed: list[uuid.UUID]
) -> tuple[uuid.UUID, int]:
    """Follow one run's stream to its end; ``(run_id, last seq received)``."""
    last = 0
    async with connection("127.0.0.1", api.port) as conn:
        async for seq, at in conn.events(f"/runs/{run_id}/events", headers=api.auth):
            receipts.append((run_id, seq, at))
            last = seq
            if seq == 1:
                replayed.append(run_id)
    return run_id, last


async def _sample_rss(api: Api, into: list[float]) -> None:
    while True:
        into.append(api.rss_mb()[0])
        await asyncio.sleep(0.2)
