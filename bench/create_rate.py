"""Create rate: ``POST /runs`` from 32 keep-alive clients against one API process, no workers.

Each request is the whole path a client pays for: key lookup, validation, the enqueue
statement (run row + ``run.queued`` + NOTIFY) and its commit, the JSON response.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.api.keys import create_key
from bench.api_server import running_api
from bench.http import connection, json_body
from bench.procs import connect
from bench.server import BenchServer
from bench.stats import summary

BODY = json_body({"agent": "demo", "input": {"steps": 0}})


async def create_rate(
    server: BenchServer,
    *,
    clients: int = 32,
    seconds: float = 10.0,
    settings: dict[str, str] | None = None,
    tenants: int = 1,
) -> dict[str, Any]:
    """``settings``: ``RUNQ_*`` of the API process (the limits section configures tenant limits);
    the clients take turns among ``tenants`` tenants' keys."""
    async with server.database("create") as url, running_api(url, **(settings or {})) as api:
        keys = [api.key] + [await create_key(url, tenant_id=f"bench-{i}") for i in range(1, tenants)]
        latencies: list[float] = []
        failures: dict[int, int] = {}
        turn = iter(range(1 << 30))

        async def client(until: float, record: bool) -> None:
            headers = {"Authorization": f"Bearer {keys[next(turn) % len(keys)]}", "Content-Type": "application/json"}
            async with connection("127.0.0.1", api.port) as conn:
                while time.monotonic() < until:
                    started = time.perf_counter()
                    status, _ = await conn.request("POST", "/runs", headers=headers, body=BODY)
                    if status != 201:
                        failures[status] = failures.get(status, 0) + 1
                    elif record:
                        latencies.append(time.perf_counter() - started)

        # A short warm-up fills the API's pool and its statement caches first.
        await asyncio.gather(*(client(time.monotonic() + 1.0, False) for _ in range(clients)))
        cpu0 = api.child.cpu_s()
        t0 = time.monotonic()
        await asyncio.gather(*(client(t0 + seconds, True) for _ in range(clients)))
        elapsed = time.monotonic() - t0
        api_cpu = api.child.cpu_s() - cpu0
        async with connect(url) as conn:
            stored = await conn.fetchval("SELECT count(*) FROM agent_runs")
    if not latencies:
        raise RuntimeError(f"no POST /runs succeeded: {failures}")
    return {
        "clients": clients,
        "tenants": tenants,
        "requests": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "latency": summary(latencies),
        "failures": failures,
        "api_cpu_ms_per_request": round(api_cpu / len(latencies) * 1000, 3),
        "runs_stored": stored,
    }
