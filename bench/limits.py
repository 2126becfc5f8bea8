"""Tenant limits (docs/limits.md): what the check costs a create, and what it buys a quiet tenant.

- ``throughput``: ``POST /runs`` from 32 clients against one API process, without limits and with
  every limit configured (high enough that none refuses): the check's own cost; the clients
  spread over 8 tenants, then all of one tenant.
- ``neighbour``: two API processes on one database; a quiet tenant creates runs one at a time
  (at most ``QUIET_PER_S`` a second, alternating the two APIs) alone, then beside a noisy tenant whose 16 clients hammer creates
  and each hold an event stream open, first with the noisy tenant unlimited, then limited. A
  noisy client that is refused waits as ``runq_client`` does (its ``Retry-After``, then up to half again) or, in the
  ``hammer`` case, tries again at once. One worker process runs throughout: the quiet tenant's
  pickup (its run's ``run.started`` after its creation) is measured beside its create latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from app.api.keys import create_key
from bench.api_server import running_api
from bench.create_rate import create_rate
from bench.http import connection, json_body
from bench.noisy_tenant import NOISY_CLIENTS
from bench.procs import PYTHON, ROOT, children, connect, wait_for, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary
from bench.throughput import worker_argv, worker_env

BODY = json_body({"agent": "demo", "input": {"steps": 0}})
# Limits that never refuse the throughput bench's tenant: the check runs in full (row lock, pending
# count, bucket) on every create.
GENEROUS = {
    "RUNQ_TENANT_CREATE_PER_S": "1000000",
    "RUNQ_TENANT_MAX_PENDING": "100000000",
    "RUNQ_TENANT_MAX_STREAMS": "100000",
}
NOISY_LIMITS = {"create_per_s": 20, "create_burst": 40, "max_pending": 200, "max_streams": 4}
WORKER_SLOTS = 8
QUIET_PER_S = 50
# The quiet tenant's pickups: from a run's creation to its first run.started.
PICKUPS = """
SELECT extract(epoch FROM e.created_at - r.created_at)
  FROM agent_runs r JOIN run_events e ON e.run_id = r.id AND e.type = 'run.started' AND e.attempt = 1
 WHERE r.tenant_id = 'quiet'
"""


async def throughput(server: BenchServer, *, seconds: float) -> dict[str, Any]:
    """32 clients spread over 8 tenants (the figure the target judges), and all of one tenant
    (the worst case: that tenant's creates take turns on its bucket row's lock)."""
    out: dict[str, Any] = {}
    for name, tenants in (("", 8), ("one_tenant_", 1)):
        none = await create_rate(server, seconds=seconds, tenants=tenants)
        limited = await create_rate(server, seconds=seconds, settings=GENEROUS, tenants=tenants)
        out |= {f"{name}none": none, f"{name}limited": limited, f"{name}ratio": round(limited["per_s"] / none["per_s"], 3)}
    return out


async def neighbour(server: BenchServer, *, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"noisy_clients": NOISY_CLIENTS, "noisy_limits": NOISY_LIMITS}
    async with (
        server.database("limits") as url,
        running_api(url) as api_a,
        running_api(url) as api_b,
        children([worker_argv(WORKER_SLOTS)], env=worker_env(url)) as workers,
    ):
        await wait_for_workers(url, 1, watch=workers)
        quiet = {"Authorization": f"Bearer {await create_key(url, tenant_id='quiet')}"}
        noisy_key = await create_key(url, tenant_id="noisy")
        admin = {"Authorization": f"Bearer {await create_key(url, tenant_id='ops', admin=True)}"}
        ports = (api_a.port, api_b.port)
        await _quiet(ports, quiet, 1.0)  # warm-up: the worker's first claims and connections
        await _pickups(url)
        await _truncate(url)
        out["alone"] = await _quiet(ports, quiet, seconds) | {"pickup": await _pickups(url)}
        for name, limited, honour in (("unlimited", False, True), ("limited", True, True), ("hammer", True, False)):
            await _truncate(url)
            if limited:
                await _put_limits(ports[0], admin, "noisy", NOISY_LIMITS)
            async with _noisy(ports, noisy_key, honour=honour) as counts:
                await asyncio.sleep(1.0)  # the noise settles first
                measured = await _quiet(ports, quiet, seconds)
            out[name] = measured | {"noisy": counts, "pickup": await _pickups(url)}
        alone = out["alone"]
        for name in ("unlimited", "limited", "hammer"):
            case = out[name]
            case["p99_vs_alone"] = round(case["latency"]["p99_ms"] / alone["latency"]["p99_ms"], 2)
            case["pickup_p99_vs_alone"] = round(case["pickup"]["p99_ms"] / alone["pickup"]["p99_ms"], 2)
    return out


async def _quiet(ports: tuple[int, int], headers: Mapping[str, str], seconds: float) -> dict[str, Any]:
    """One client creating runs one at a time, ``QUIET_PER_S`` a second at most (a quiet tenant:
    alone, its own runs must not queue behind each other), alternating the two APIs."""
    latencies: list[float] = []
    sent = {**headers, "Content-Type": "application/json"}
    async with connection("127.0.0.1", ports[0]) as a, connection("127.0.0.1", ports[1]) as b:
        begun = time.monotonic()
        until = begun + seconds
        while (now := time.monotonic()) < until:
            await asyncio.sleep(begun + len(latencies) / QUIET_PER_S - now)  # negative: at once
            conn = (a, b)[len(latencies) % 2]
            started = time.perf_counter()
            status, body = await conn.request("POST", "/runs", headers=sent, body=BODY)
            if status != 201:
                raise RuntimeError(f"the quiet tenant's create was refused: {status} {body[:200]!r}")
            latencies.append(time.perf_counter() - started)
    return {"latency": summary(latencies)}


@contextlib.asynccontextmanager
async def _noisy(ports: tuple[int, int], key: str, *, honour: bool) -> AsyncIterator[dict[str, int]]:
    """The noisy tenant's clients in a process of their own (bench/noisy_tenant.py), so that
    their responses are not parsed on the quiet client's event loop; its counts once it stops."""
    argv = [PYTHON, "-m", "bench.noisy_tenant", str(ports[0]), str(ports[1]), "--honour" if honour else "--hammer"]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env={**os.environ, "RUNQ_BENCH_NOISY_KEY": key},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        out, _ = await proc.communicate(b"")  # its stdin closes: it stops and prints its counts
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}")
        counts |= json.loads(out)


async def _pickups(url: str) -> dict[str, float]:
    """The quiet tenant's pickups of this case, once the worker has started all its runs (a
    backlog the noisy tenant left is drained first)."""
    async with connect(url) as conn:

        async def all_started() -> bool:
            return not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM agent_runs WHERE tenant_id = 'quiet' AND status = 'pending')"
            )

        await wait_for(all_started, timeout_s=300, what="the quiet tenant's runs started", every_s=0.2)
        return summary([float(row[0]) for row in await conn.fetch(PICKUPS)])


async def _put_limits(port: int, admin: Mapping[str, str], tenant: str, limits: Mapping[str, Any]) -> None:
    async with connection("127.0.0.1", port) as conn:
        status, body = await conn.request(
            "PUT", f"/admin/tenants/{tenant}/limits",
            headers={**admin, "Content-Type": "application/json"}, body=json_body(dict(limits)),
        )  # fmt: skip
    if status != 200:
        raise RuntimeError(f"PUT limits: {status} {body[:200]!r}")


async def _truncate(url: str) -> None:
    """Each case starts from an empty queue and no limits (the quiet tenant's runs measured)."""
    async with connect(url) as conn:
        await conn.execute("TRUNCATE agent_runs, tenant_buckets, stream_slots CASCADE")
