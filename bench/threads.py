"""Claim latency with threads vs without: the same number of pending runs, alone or spread over
threads (five turns each), with some threads busy so that their later turns sit blocked at the
head of the queue, where every claim has to step over them (the NOT EXISTS turn check).

Two databases sampled alternately (``claim_batch(limit=1)`` then its ending), as the history
benchmark in :mod:`bench.cost` does, so that both see the same drift of a shared machine.
"""

from __future__ import annotations

import time
from typing import Any

from app.db.engine import create_engine
from app.domain import Finish
from app.queue import Queue
from bench.cost import PENDING_ROWS
from bench.procs import APP_NAME, connect
from bench.server import BenchServer
from bench.stats import summary

TURNS = 5
# $1 threads with $2 pending turns each; runs ranked turn by turn, as users send messages, and
# the first $3 threads (the busy ones) at the head of the queue.
THREAD_ROWS = (
    "WITH th AS (INSERT INTO threads (tenant_id, run_count)"
    " SELECT 'bench', $2 FROM generate_series(1, $1) RETURNING id),"
    " numbered AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM th),"
    " ins AS (INSERT INTO agent_runs (tenant_id, agent, max_attempts, input_json, last_event_seq, thread_id,"
    " thread_turn, queue_rank)"
    " SELECT 'bench', 'demo', 3, '{\"steps\": 0}', 1, numbered.id, t,"
    " now() - interval '1 day' + make_interval(secs => CASE WHEN numbered.n <= $3 THEN 0 ELSE 1 END"
    " + t * 0.001 + numbered.n * 0.000001)"
    " FROM numbered, generate_series(1, $2) AS t RETURNING id, history_at)"
    " INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)"
    " SELECT id, 1, 'run.queued', '{}', 0, history_at FROM ins"
)


async def claim_latency(server: BenchServer, *, pending: int, busy: int, samples: int) -> dict[str, Any]:
    """p50/p99 of a claim with ``pending`` lone runs vs ``pending`` runs in threads of
    :data:`TURNS` turns, ``busy`` of those threads leased (their later turns blocked)."""
    async with server.database("threads_without") as without_url, server.database("threads_with") as with_url:
        async with connect(without_url) as conn:
            await conn.execute(PENDING_ROWS, pending)
            await conn.execute("VACUUM ANALYZE agent_runs")
        async with connect(with_url) as conn:
            await conn.execute(THREAD_ROWS, pending // TURNS, TURNS, busy)
            await conn.execute("VACUUM ANALYZE agent_runs")
        engines = [create_engine(url, pool_size=2, application_name=APP_NAME) for url in (without_url, with_url)]
        queues = [Queue(engine) for engine in engines]
        latencies: tuple[list[float], list[float]] = ([], [])
        try:
            if busy:
                held = await queues[1].claim_batch(worker_id="bench-busy", limit=busy)
                assert len(held) == busy, f"{len(held)} of {busy} busy threads claimed"
            for i in range(samples):
                for side in (i % 2, 1 - i % 2):
                    started = time.perf_counter()
                    (claim,) = await queues[side].claim_batch(worker_id="bench", limit=1)
                    latencies[side].append(time.perf_counter() - started)
                    await queues[side].finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=Finish.done({}))
        finally:
            for engine in engines:
                await engine.dispose()
    without, with_threads = summary(latencies[0]), summary(latencies[1])
    return {
        "pending": pending,
        "turns_per_thread": TURNS,
        "busy_threads": busy,
        "blocked_at_head": busy * (TURNS - 1),
        "without": without,
        "with_threads": with_threads,
        "ratio_p50": round(with_threads["p50_ms"] / without["p50_ms"], 3),
        "ratio_p99": round(with_threads["p99_ms"] / without["p99_ms"], 3),
    }
