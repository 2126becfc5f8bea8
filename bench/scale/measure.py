"""What the harness measures on the cluster: claims per created run, the drain rate, SSE
delivery at 10,000 subscribers, and a worker host cut off for longer than a lease."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

from app.db.engine import create_engine
from app.queue import Queue
from bench.api_server import TENANT
from bench.http import HttpError, connection
from bench.procs import APP_NAME, connect, wait_for
from bench.scale.cluster import Api, Cluster
from bench.scale.netns import Topology
from bench.stats import summary

CLAIMS = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE '%lease_id = gen_random_uuid()%'"
LIVE = "SELECT count(*) FROM agent_runs WHERE status IN ('pending', 'leased')"


async def claims_per_run(c: Cluster, *, runs: int, over_s: float) -> dict[str, Any]:
    """Runs created one by one through the APIs (each NOTIFYs the runs channel) over ``over_s``;
    claim statements counted by pg_stat_statements, less the idle workers' fallback polls
    (measured over as long a quiet window just before)."""
    async with connect(c.url) as conn:
        quiet_from = await conn.fetchval(CLAIMS)
        await asyncio.sleep(over_s)
        polled = await conn.fetchval(CLAIMS) - quiet_from
        before = await conn.fetchval(CLAIMS)
        started = time.monotonic()
        for n in range(runs):
            await asyncio.sleep(max(started + over_s * n / runs - time.monotonic(), 0))
            await c.post_run(c.apis[n % len(c.apis)], {"agent": "demo", "input": {"steps": 0}})
        await asyncio.sleep(max(started + over_s - time.monotonic(), 0))
        await wait_for(lambda: _none_live(conn), timeout_s=120, what="the runs to finish")
        claims = await conn.fetchval(CLAIMS) - before
    return {
        "idle_workers": len(c.workers),
        "runs": runs,
        "claim_statements": int(claims),
        "fallback_polls_in_as_long_a_quiet_window": int(polled),
        "claims_per_created_run": round((claims - polled) / runs, 2),
    }


async def _none_live(conn: Any) -> bool:
    return bool(await conn.fetchval(LIVE) == 0)


async def drain(c: Cluster, *, runs: int) -> dict[str, Any]:
    """A backlog committed in one transaction, drained by every worker: runs per second."""
    engine = create_engine(c.url, pool_size=1, application_name=APP_NAME)
    try:
        await Queue(engine).enqueue_many(tenant_id=TENANT, agent="demo", inputs=[{"steps": 0}] * runs)
    finally:
        await engine.dispose()
    started = time.time()
    async with connect(c.url) as conn:
        ended = await wait_for(lambda: _none_live(conn), timeout_s=600, what="the backlog", every_s=0.1)
    return {"workers": len(c.workers), "runs": runs, "seconds": round(ended - started, 2),
            "runs_per_s": round(runs / (ended - started), 1)}


Receipt = tuple[uuid.UUID, int, float]


async def sse_fan_out(c: Cluster, *, subscribers: int, runs: int, steps: int, step_s: float) -> dict[str, Any]:
    """``subscribers`` live streams, ``subscribers / runs`` per run, spread over the APIs. The
    runs are stored held back, every stream connects and gets its replayed run.queued, then
    the runs are released over one step and run live. Latency: the event's commit timestamp
    (track_commit_timestamp) to the frame's receipt, one machine, one clock."""
    engine = create_engine(c.url, pool_size=1, application_name=APP_NAME)
    try:
        ids = await Queue(engine).enqueue_many(
            tenant_id=TENANT, agent="demo", inputs=[{"prompt": "hello scale", "steps": steps, "step_s": step_s}] * runs,
            delay_s=3600.0,
        )
    finally:
        await engine.dispose()
    receipts: list[Receipt] = []
    replayed: set[tuple[int, uuid.UUID]] = set()
    rss: dict[int, float] = {}
    per_run = subscribers // runs
    streams: list[asyncio.Task[None]] = []
    sampler = asyncio.create_task(_sample_rss(c.apis, rss))
    try:
        connect_started = time.monotonic()
        for wave in range(per_run):  # one stream per run per wave, as viewers arrive
            for i, run_id in enumerate(ids):
                api = c.apis[(wave * runs + i) % len(c.apis)]
                streams.append(asyncio.create_task(_follow(api, c.auth, run_id, wave, receipts, replayed)))

            async def caught_up(expected: int = len(streams)) -> bool:
                for task in streams:
                    if task.done():
                        task.result()
                return len(replayed) >= expected

            try:
                await wait_for(caught_up, timeout_s=300, what="every stream's replay", every_s=0.05)
            except TimeoutError as exc:  # say how far it got
                raise TimeoutError(
                    f"{exc}: {len(replayed)} of {len(streams)} streams replayed after"
                    f" {time.monotonic() - connect_started:.0f} s, {RECONNECTS[0]} reconnects"
                ) from exc
        connect_s = time.monotonic() - connect_started
        connected_rss = {port: max(api.rss_mb(), rss.get(port, 0.0)) for port, api in ((a.port, a) for a in c.apis)}
        async with connect(c.url) as conn:
            started = time.monotonic()
            for n, run_id in enumerate(ids):
                await asyncio.sleep(max(started + step_s * n / len(ids) - time.monotonic(), 0))
                # and wake a worker for it: the runs start as they are released, spread over the
                # step (a poll would start them together, a burst every step for the whole phase)
                await conn.execute(
                    "WITH released AS (UPDATE agent_runs SET available_at = now(), queue_rank = now()"
                    " WHERE id = $1 RETURNING id) SELECT runq_wake_workers((SELECT count(*) FROM released))",
                    run_id,
                )
        done, pending = await asyncio.wait(streams, timeout=steps * step_s + 300)
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(streams)} streams did not end")
        for task in done:
            task.result()
    finally:
        sampler.cancel()
        for task in streams:
            task.cancel()
    async with connect(c.url) as conn:
        rows = await conn.fetch(
            "SELECT run_id, seq, extract(epoch FROM pg_xact_commit_timestamp(xmin)) AS at FROM run_events"
            " WHERE run_id = ANY($1::uuid[])", ids
        )
    committed = {(r["run_id"], r["seq"]): float(r["at"]) for r in rows}
    live = [(run_id, seq, at) for run_id, seq, at in receipts if seq > 1]
    latencies = [at - committed[(run_id, seq)] for run_id, seq, at in live]
    expected = per_run * len(committed)
    return {
        "subscribers": per_run * runs,
        "apis": len(c.apis),
        "runs": runs,
        "events_written": len(committed),
        "frames_received": len(receipts),
        "frames_expected": expected,
        "latency_s": summary(latencies),
        "frames_per_s": round(len(live) / max(max(at for *_, at in live) - min(at for *_, at in live), 1e-9), 1)
        if live else 0.0,
        "connect_s": round(connect_s, 1),
        "reconnects": RECONNECTS[0],
        "api_rss_mb_connected": {str(k): round(v, 1) for k, v in connected_rss.items()},
        "api_rss_mb_max": {str(k): round(v, 1) for k, v in rss.items()},
    }


RECONNECTS: list[int] = [0]


async def _follow(
    api: Api, auth: dict[str, str], run_id: uuid.UUID, wave: int, receipts: list[Receipt],
    replayed: set[tuple[int, uuid.UUID]],
) -> None:
    """One subscriber to the end of its run; a refused or dropped stream (503 while the API
    cannot reach the database in time) is resumed after the last seq, as EventSource does."""
    last = 0
    while True:
        try:
            async with connection(api.host.address, api.port) as conn:
                async for seq, at in conn.events(f"/runs/{run_id}/events?after={last}", headers=auth):
                    receipts.append((run_id, seq, at))
                    last = seq
                    if seq == 1:
                        replayed.add((wave, run_id))
            return
        except (HttpError, OSError, asyncio.IncompleteReadError):
            RECONNECTS[0] += 1
            await asyncio.sleep(1.0)


async def _sample_rss(apis: list[Api], into: dict[int, float]) -> None:
    while True:
        for api in apis:
            into[api.port] = max(into.get(api.port, 0.0), api.rss_mb())
        await asyncio.sleep(0.5)


async def partition(c: Cluster, net: Topology, *, runs: int, cut_s: float) -> dict[str, Any]:
    """Streaming runs on every host; the link of the worker host holding most of them cut for
    ``cut_s`` (longer than a lease), then healed. Lost: runs not done at the end. Fenced writes:
    events of the cut attempt stored after the reaper ended it (must be 0; refused ones are
    fine). Takeover: from the cut to the next attempt's run.started on another host."""
    inputs = [{"prompt": "partition", "steps": 30, "step_s": 0.5}] * runs
    engine = create_engine(c.url, pool_size=1, application_name=APP_NAME)
    try:
        ids = await Queue(engine).enqueue_many(tenant_id=TENANT, agent="demo", inputs=inputs)
    finally:
        await engine.dispose()
    async with connect(c.url) as conn:

        async def all_leased() -> bool:
            n = await conn.fetchval("SELECT count(*) FROM agent_runs WHERE id = ANY($1::uuid[]) AND status = 'leased'", ids)
            return bool(n == runs)

        await wait_for(all_leased, timeout_s=120, what="every partition run leased")
        await asyncio.sleep(2.0)  # streaming, checkpoints stored
        held = await conn.fetch("SELECT id, locked_by, attempts FROM agent_runs WHERE id = ANY($1::uuid[])", ids)
        by_host = Counter(c.host_of(r["locked_by"]) for r in held)
        namespace = by_host.most_common(1)[0][0]
        role = next(r for r, h in net.hosts.items() if h.name == namespace)
        cut_runs = {r["id"]: r["attempts"] for r in held if c.host_of(r["locked_by"]) == namespace}
        cut_at = time.time()
        net.cut(role)
        await asyncio.sleep(cut_s)
        net.heal(role)
        healed_at = time.time()
        await wait_for(lambda: _none_of_live(conn, ids), timeout_s=300, what="the partition runs to end")
        final = await conn.fetch("SELECT id, status FROM agent_runs WHERE id = ANY($1::uuid[])", ids)
        landed, takeovers, expiries = 0, [], []
        for run_id, attempt in cut_runs.items():
            events = await conn.fetch(
                "SELECT seq, type, attempt, data, extract(epoch FROM pg_xact_commit_timestamp(xmin)) AS at"
                " FROM run_events WHERE run_id = $1 ORDER BY seq", run_id
            )
            expired = next((e for e in events if e["type"] == "run.retrying" and e["attempt"] == attempt), None)
            if expired is None:
                continue
            expiries.append(float(expired["at"]) - cut_at)
            landed += sum(1 for e in events if e["attempt"] == attempt and e["seq"] > expired["seq"])
            nxt = next(e for e in events if e["type"] == "run.started" and e["attempt"] == attempt + 1)
            takeovers.append(float(nxt["at"]) - cut_at)
    return {
        "runs": runs,
        "host_cut": namespace,
        "runs_by_host": dict(by_host),
        "runs_on_cut_host": len(cut_runs),
        "cut_s": round(healed_at - cut_at, 1),
        "lease_s": 5.0,
        "lost": sum(1 for r in final if r["status"] != "done"),
        "fenced_writes_landed": landed,
        "lease_expired_after_cut_s": summary(expiries) if expiries else None,
        "taken_by_another_host_after_cut_s": summary(takeovers) if takeovers else None,
        "reclaimed": len(takeovers),
    }


async def _none_of_live(conn: Any, ids: list[uuid.UUID]) -> bool:
    n = await conn.fetchval(
        "SELECT count(*) FROM agent_runs WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'leased')", ids
    )
    return bool(n == 0)
