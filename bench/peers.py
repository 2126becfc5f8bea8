"""PgQueuer and Procrastinate on the same server: a 20,000 no-op drain each, and PgQueuer's pickup
latency, each in a fresh database set up by the peer's own schema installer.

Settings follow each project's guidance: PgQueuer on the asyncpg driver with its benchmark's
batch size (10) and uvloop; Procrastinate's async worker with ``concurrency`` and
LISTEN/NOTIFY. Both are swept over the same process counts as runq's workers.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from app.db.url import asyncpg_dsn
from bench.drain import best, timed_drain
from bench.procs import APP_NAME, IDLE_SESSIONS, PYTHON, children, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary


def _pgqueuer_argv(dsn: str, *, batch_size: int, instances: int = 1, stamp: bool = False) -> list[str]:
    argv = [PYTHON, "-m", "bench.peer_workers", "pgqueuer", "--dsn", dsn]
    argv += ["--batch-size", str(batch_size), "--instances", str(instances)]
    return argv + (["--stamp"] if stamp else [])


@asynccontextmanager
async def _pgqueuer_installed(dsn: str) -> AsyncIterator[Any]:
    """PgQueuer's ``Queries`` on a fresh database, after its own ``install()``."""
    from pgqueuer import Queries
    from pgqueuer.db import AsyncpgDriver

    conn = await asyncpg.connect(dsn, server_settings={"application_name": APP_NAME})
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        yield queries
    finally:
        await conn.close()


async def pgqueuer_drain(
    server: BenchServer,
    *,
    jobs: int,
    processes: Sequence[int],
    batch_sizes: Sequence[int] = (10,),
    rounds: int = 1,
) -> dict[str, Any]:
    """Swept over processes and batch sizes, ``rounds`` drains each, as runq is over processes
    and run slots: each queue is judged by its best drain."""
    results = []
    for n, batch_size, _ in itertools.product(processes, batch_sizes, range(rounds)):
        async with server.database("pgqueuer", migrated=False) as url:
            dsn = asyncpg_dsn(url)
            async with _pgqueuer_installed(dsn) as queries:

                async def enqueue() -> None:
                    await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)

                result = await timed_drain(
                    server,
                    url,
                    workers=[_pgqueuer_argv(dsn, batch_size=batch_size)] * n,
                    env={},
                    ready=(n, IDLE_SESSIONS),
                    enqueue=enqueue,
                    remaining_sql="SELECT count(*) FROM (SELECT 1 FROM pgqueuer LIMIT 1) AS left_",
                    table="pgqueuer",
                    jobs=jobs,
                    timeout_s=max(60.0, jobs / 40),
                )
        results.append({**result, "batch_size": batch_size})
    return best(results)


async def procrastinate_drain(
    server: BenchServer, *, jobs: int, processes: Sequence[int], concurrency: int = 16
) -> dict[str, Any]:
    import procrastinate

    results = []
    for n in processes:
        async with server.database("procrastinate", migrated=False) as url:
            dsn = asyncpg_dsn(url)
            connector = procrastinate.PsycopgConnector(conninfo=dsn, kwargs={"application_name": APP_NAME})
            app = procrastinate.App(connector=connector)
            noop = app.task(name="noop")(_noop)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

                argv = [PYTHON, "-m", "bench.peer_workers", "procrastinate", "--dsn", dsn]
                result = await timed_drain(
                    server,
                    url,
                    workers=[[*argv, "--concurrency", str(concurrency)]] * n,
                    env={},
                    enqueue=functools.partial(noop.batch_defer_async, *([{}] * jobs)),
                    remaining_sql="SELECT count(*) FROM (SELECT 1 FROM procrastinate_jobs"
                    " WHERE status IN ('todo', 'doing') LIMIT 1) AS left_",
                    table="procrastinate_jobs",
                    jobs=jobs,
                    timeout_s=max(60.0, jobs / 40),
                )
        results.append({**result, "concurrency": concurrency})
    return best(results)


async def _noop() -> None:
    return None


async def pgqueuer_pickup(server: BenchServer, *, samples: int, gap_s: float = 0.02) -> dict[str, Any]:
    """Enqueue commit (client clock after COMMIT returns) → the job function starting, with one
    idle worker process and one job at a time; both clocks are this host's ``time.time()``."""
    async with server.database("pgqueuer_pickup", migrated=False) as url:
        dsn = asyncpg_dsn(url)
        argv = _pgqueuer_argv(dsn, batch_size=10, stamp=True)
        async with (
            _pgqueuer_installed(dsn) as queries,
            children([argv], env={}, stdout_pipe=True) as procs,
        ):
            await wait_for_workers(url, 1, sessions=IDLE_SESSIONS, watch=procs)
            stdout = procs[0].proc.stdout
            assert stdout is not None
            latencies = []
            for i in range(samples):
                await queries.enqueue("noop", str(i).encode())
                committed = time.time()
                line = await asyncio.wait_for(stdout.readline(), 10)
                tag, started = line.decode().split()
                if tag != str(i):
                    raise RuntimeError(f"expected job {i}, got {tag}")
                latencies.append(float(started) - committed)
                await asyncio.sleep(gap_s)
    return summary(latencies)
