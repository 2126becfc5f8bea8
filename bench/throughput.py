"""runq's throughput: no-op demo runs end to end through worker processes, and the repository
layer alone (claim + complete from a few async claimers in this process, no agent).

Both count what runq stores for every run: the run row's three transitions and its three
events (``run.queued`` at enqueue, ``run.started`` in the claim, ``run.completed`` in the
completion), each in the same statement as its transition.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from app.db.engine import create_engine
from app.db.url import asyncpg_dsn
from app.domain import Finish
from app.queue import CLAIM_BATCH, FINISH_IF_LEASED, Ended, Queue
from bench.drain import best, timed_drain
from bench.procs import APP_NAME, PYTHON, connect
from bench.server import BenchServer

NOOP = {"steps": 0}
# 0 once nothing is left; stops at the first unfinished row (the harness polls every 0.1 s and
# must not spend the machine's CPU counting a 20,000-row backlog each time).
REMAINING = "SELECT count(*) FROM (SELECT 1 FROM agent_runs WHERE status IN ('pending', 'leased') LIMIT 1) AS left_"
# The worker's one LISTEN session per process (app/worker/wakeup.py).
WORKER_READY = "application_name = 'runq-listen'"


def worker_argv(concurrency: int) -> list[str]:
    return [PYTHON, "-m", "app.worker", "--concurrency", str(concurrency)]


def worker_env(url: str, **settings: str) -> dict[str, str]:
    """The environment of a bench worker: its database, JSON logs (to a file), and no
    shutdown grace, so that stopping a worker that still holds runs releases them at once."""
    return {"RUNQ_DATABASE_URL": url, "RUNQ_LOG_FORMAT": "json", "RUNQ_SHUTDOWN_GRACE_S": "0", **settings}


async def enqueue_backlog(url: str, runs: int, *, agent: str = "demo", input: dict[str, Any] = NOOP) -> None:
    """Commit ``runs`` pending runs in one transaction (Queue.enqueue_many)."""
    engine = create_engine(url, pool_size=1, application_name=APP_NAME)
    try:
        await Queue(engine).enqueue_many(tenant_id="bench", agent=agent, inputs=[input] * runs)
    finally:
        await engine.dispose()


async def end_to_end(
    server: BenchServer, *, runs: int, processes: Sequence[int], concurrency: Sequence[int], rounds: int = 1
) -> dict[str, Any]:
    """Worker processes burn down a backlog of no-op demo runs: claim, three events, done.

    Swept over processes and run slots per process (``--concurrency``, runq's batch size: a
    worker claims up to its free slots in one statement), ``rounds`` drains each, as PgQueuer
    is over processes and batch sizes."""
    results = []
    for n, slots, _ in itertools.product(processes, concurrency, range(rounds)):
        async with server.database("e2e") as url:
            result = await timed_drain(
                server,
                url,
                workers=[worker_argv(slots)] * n,
                env=worker_env(url),
                ready=(n, WORKER_READY),
                enqueue=functools.partial(enqueue_backlog, url, runs),
                remaining_sql=REMAINING,
                table="agent_runs",
                jobs=runs,
                timeout_s=max(60.0, runs / 40),
            )
        results.append({**result, "concurrency": slots})
    return best(results)


class PreparedStatements:
    """The queue's own statements (imported from app.queue, not rewritten) executed as asyncpg
    prepared statements in autocommit: one round trip per statement, no SQLAlchemy.

    Not a runq code path: the prototype of the driver-path proposal in docs/benchmarks.md,
    measured so that the proposal comes with its figure.
    """

    def __init__(self, pool: asyncpg.Pool, dialect: Any) -> None:
        self._pool = pool
        self._compiled = {
            name: statement.compile(dialect=dialect)
            for name, statement in (("claim", CLAIM_BATCH), ("complete_many", FINISH_IF_LEASED))
        }

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[asyncpg.Record]:
        compiled = self._compiled[name]
        args = [params[key] for key in compiled.positiontup or ()]
        async with self._pool.acquire() as conn:
            return await conn.fetch(compiled.string, *args)

    async def claim(self, *, worker_id: str, limit: int, lease_s: float = 30.0) -> list[tuple[Any, Any]]:
        rows = await self._fetch("claim", {"worker_id": worker_id, "limit": limit, "lease_s": lease_s})
        return [(r["id"], r["lease_id"]) for r in rows]

    async def complete_many(self, claims: Sequence[tuple[Any, Any]]) -> int:
        ordered = sorted(claims)
        params = {
            "run_ids": [c[0] for c in ordered],
            "lease_ids": [c[1] for c in ordered],
            "endings": ["done"] * len(ordered),
            "outputs": ["{}"] * len(ordered),
            "error_codes": [None] * len(ordered),
            "error_messages": [None] * len(ordered),
            "retry_base_s": 5.0,
            "retry_max_s": 300.0,
            "aging_s": 60.0,
            "event_counts": [0] * len(ordered),
            "event_run_ids": [],
            "event_lease_ids": [],
            "types": [],
            "datas": [],
        }
        return len(await self._fetch("complete_many", params))


async def repository_layer(
    server: BenchServer, *, runs: int, claimers: int = 4, batch: int = 8
) -> dict[str, Any]:
    """Claim batches and complete them from ``claimers`` loops in this process, three ways:
    as shipped (one ``complete`` per run), with ``complete_many`` (one per batch), and the
    same two statements as asyncpg prepared statements in autocommit."""
    variants: dict[str, Any] = {}
    for variant in ("complete_each", "complete_many", "asyncpg_prepared"):
        async with server.database("repository") as url:
            await enqueue_backlog(url, runs)
            async with connect(url) as conn:
                await conn.execute("ANALYZE agent_runs")
            variants[variant] = await _claim_complete(url, variant, runs=runs, claimers=claimers, batch=batch)
    return {"jobs": runs, "claimers": claimers, "batch": batch, **variants}


async def _claim_complete(url: str, variant: str, *, runs: int, claimers: int, batch: int) -> dict[str, Any]:
    # Room for every concurrent statement: a pool too small would measure waiting for it.
    engine = create_engine(url, pool_size=claimers * batch, application_name=APP_NAME)
    pool = await asyncpg.create_pool(asyncpg_dsn(url), min_size=claimers, max_size=claimers)
    queue, prepared = Queue(engine), PreparedStatements(pool, engine.dialect)

    async def step(worker_id: str) -> int:
        """One claim and its completions; the number of runs finished (0: nothing left)."""
        if variant == "asyncpg_prepared":
            held = await prepared.claim(worker_id=worker_id, limit=batch)
            return await prepared.complete_many(held) if held else 0
        claims = await queue.claim_batch(worker_id=worker_id, limit=batch)
        if not claims:
            return 0
        if variant == "complete_many":
            return len(await queue.finish_many([Ended(c.run.id, c.lease_id, Finish.done({})) for c in claims]))
        await asyncio.gather(*(queue.finish(run_id=c.run.id, lease_id=c.lease_id, finish=Finish.done({})) for c in claims))
        return len(claims)

    async def claimer(i: int) -> int:
        done = 0
        while finished := await step(f"bench:{i}"):
            done += finished
        return done

    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        done = sum(await asyncio.gather(*(claimer(i) for i in range(claimers))))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await pool.close()
        await engine.dispose()
    if done != runs:
        raise RuntimeError(f"{variant}: the claimers finished {done} runs of {runs}")
    return {
        "seconds": round(seconds, 3),
        "per_s": round(runs / seconds, 1),
        "python_cpu_ms_per_run": round(cpu / runs * 1000, 3),
    }
