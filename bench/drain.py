"""Burn down a pre-built backlog through real worker processes and time it, the same way for
every queue: workers first start idle (LISTENing), then one transaction commits the whole
backlog, and the clock runs from that commit until nothing is left to do.

Starting the workers before the backlog exists keeps interpreter start-up and imports out of
the figure for every queue alike; the single commit makes all jobs visible at one instant.
Right after the commit (on the clock) the queue's table is analyzed, as autovacuum would do
within its first minute in production: on a fresh database the planner otherwise believes
the table is empty, and a plan chosen for an empty table says nothing about a queue.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import make_url

from bench.procs import LISTENING, children, connect, machine_busy_s, wait_for, wait_for_workers
from bench.server import BenchServer


async def timed_drain(
    server: BenchServer,
    url: str,
    *,
    workers: Sequence[Sequence[str]],
    env: Mapping[str, str],
    ready: tuple[int, str] | None = None,
    enqueue: Callable[[], Awaitable[object]],
    remaining_sql: str,
    table: str,
    jobs: int,
    timeout_s: float,
) -> dict[str, Any]:
    """``enqueue`` commits the backlog; ``remaining_sql`` counts jobs not yet finished;
    ``ready`` is how many worker sessions must match which condition (default: one LISTEN
    session per worker process)."""
    count, sessions = ready or (len(workers), LISTENING)
    database = make_url(url).database or ""
    async with children(workers, env=env) as procs, connect(url) as conn:
        await wait_for_workers(url, count, sessions=sessions, watch=procs)
        cpu_before = sum(p.cpu_s() for p in procs)
        stats_before = await server.statement_stats(database)
        await enqueue()
        t0, busy0 = time.time(), machine_busy_s()
        await conn.execute(f"ANALYZE {table}")

        async def drained() -> bool:
            return bool(await conn.fetchval(remaining_sql) == 0)

        t_end = await wait_for(
            drained, timeout_s=timeout_s, what="the backlog to drain", watch=procs, every_s=0.1
        )
        busy = machine_busy_s() - busy0
        worker_cpu = sum(p.cpu_s() for p in procs) - cpu_before
        stats = _per_job(stats_before, await server.statement_stats(database), jobs, mine=remaining_sql)
    seconds = t_end - t0
    return {
        "jobs": jobs,
        "processes": len(workers),
        "seconds": round(seconds, 3),
        "per_s": round(jobs / seconds, 1),
        "worker_cpu_ms_per_job": round(worker_cpu / jobs * 1000, 3),
        "machine_cpu_s": round(busy, 2),
        **stats,
    }


def _per_job(
    before: Mapping[str, tuple[int, float]], after: Mapping[str, tuple[int, float]], jobs: int, *, mine: str
) -> dict[str, Any]:
    """Statements (BEGIN and COMMIT included: each is a round trip) and server execution time
    per job, from pg_stat_statements, without the bench's own polling and ANALYZE."""
    if not after:
        return {}
    # The polling query as pg_stat_statements shows it (constants become $n): up to its subquery.
    ours = (mine.split(" FROM (")[0] + " FROM (", "ANALYZE")
    delta = {
        q: (n - before.get(q, (0, 0.0))[0], ms - before.get(q, (0, 0.0))[1])
        for q, (n, ms) in after.items()
        if not q.startswith(ours)
    }
    top = sorted(delta.items(), key=lambda kv: -kv[1][1])[:5]
    return {
        "statements_per_job": round(sum(n for n, _ in delta.values()) / jobs, 2),
        "server_exec_ms_per_job": round(sum(ms for _, ms in delta.values()) / jobs, 3),
        "top_statements": [
            {"per_job": round(n / jobs, 3), "ms_per_job": round(ms / jobs, 3), "query": " ".join(q.split())[:90]}
            for q, (n, ms) in top
        ],
    }


def best(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The best configuration of a sweep, with the others kept alongside."""
    top = max(results, key=lambda r: r["per_s"])
    return {**top, "sweep": [{k: v for k, v in r.items() if k != "sweep"} for r in results]}
