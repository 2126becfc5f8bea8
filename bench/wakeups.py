"""Wake-ups vs the fleet: claim statements per created run, and pickup latency, with 8, 32 and
128 idle worker processes of one slot each.

Claims are counted from ``pg_stat_statements`` (the bench server loads it; every claim,
capped or not, is one of two statements). Two shapes per fleet: runs one at a time (a
pickup sample each: enqueue commit → agent start, as in :mod:`bench.latency`), where a
broadcast NOTIFY costs one claim per idle worker; and a burst enqueued by four clients at
once. ``broadcast`` replaces ``runq_wake_workers()`` in the section's database by the old
behaviour (one NOTIFY on ``runq_runs``, every idle worker claims) for the comparison.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from app.db.engine import create_engine
from app.queue import EVENTS_CHANNEL, NewRun, Queue
from bench.latency import AGENTS, COMPLETED_SEQ
from bench.procs import APP_NAME, children, connect, wait_for, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary
from bench.throughput import WORKER_READY, worker_argv, worker_env

CLAIM_MARKS = ("WITH picked AS", "WITH inflight AS")
BROADCAST = """
CREATE OR REPLACE FUNCTION runq_wake_workers(runs bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF runs > 0 THEN PERFORM pg_notify('runq_runs', ''); END IF;
END $$
"""
ENQUEUERS = 4


async def fleet(
    server: BenchServer, *, workers: Sequence[int], samples: int, burst: int, modes: Sequence[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"method": "pg_stat_statements", "slots_per_worker": 1}
    for mode in modes:
        for n in workers:
            out[f"{mode}_{n}"] = await _one(server, workers=n, samples=samples, burst=burst, mode=mode)
            print(f"   {mode} {n} workers: {out[f'{mode}_{n}']}", flush=True)
    return out


async def _claims(server: BenchServer, database: str) -> int:
    stats = await server.statement_stats(database)
    return sum(calls for query, (calls, _) in stats.items() if query.lstrip().startswith(CLAIM_MARKS))


async def _one(server: BenchServer, *, workers: int, samples: int, burst: int, mode: str) -> dict[str, Any]:
    name = f"wakeups_{mode}_{workers}"
    async with server.database(name) as url:
        database = f"runq_bench_{name}"
        engine = create_engine(url, pool_size=ENQUEUERS, application_name=APP_NAME)
        queue = Queue(engine)
        finished: dict[uuid.UUID, asyncio.Event] = {}

        def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            for item in payload.split(","):
                run_id, _, seq = item.partition(":")
                if int(seq) >= COMPLETED_SEQ:
                    finished.setdefault(uuid.UUID(run_id), asyncio.Event()).set()

        # small pools and no metrics port: 128 processes on 2 cores must fit
        env = worker_env(url, RUNQ_AGENTS=AGENTS, RUNQ_DB_POOL_SIZE="2")
        try:
            async with connect(url) as conn:
                if mode == "broadcast":
                    await conn.execute(BROADCAST)
                async with children([worker_argv(1)] * workers, env=env) as procs:
                    await conn.add_listener(EVENTS_CHANNEL, notified)
                    await wait_for_workers(url, workers, sessions=WORKER_READY, watch=procs, timeout_s=600)
                    await _settle(server, database, procs)
                    before = await _claims(server, database)
                    to_start, committed = [], {}
                    for _ in range(samples):
                        run, _ = await queue.enqueue(NewRun(tenant_id="bench", agent="stamp", input={}))
                        committed[run.id] = time.time()
                        await asyncio.wait_for(finished.setdefault(run.id, asyncio.Event()).wait(), 30)
                        await asyncio.sleep(0.02)
                    one_at_a_time = await _claims(server, database) - before
                    rows = await conn.fetch("SELECT id, (output->>'started_at')::float8 AS started FROM agent_runs")
                    to_start = [r["started"] - committed[r["id"]] for r in rows]

                    before = await _claims(server, database)
                    started = time.monotonic()

                    async def enqueue(k: int) -> None:
                        for _ in range(k):
                            await queue.enqueue(NewRun(tenant_id="bench", agent="stamp", input={}))

                    await asyncio.gather(*(enqueue(burst // ENQUEUERS) for _ in range(ENQUEUERS)))

                    async def drained() -> bool:
                        done = await conn.fetchval("SELECT count(*) FROM agent_runs WHERE status = 'done'")
                        return bool(done >= samples + burst // ENQUEUERS * ENQUEUERS)

                    await wait_for(drained, timeout_s=600, what="the burst done", every_s=0.1, watch=procs)
                    burst_s = time.monotonic() - started
                    burst_claims = await _claims(server, database) - before
        finally:
            await engine.dispose()
    runs = burst // ENQUEUERS * ENQUEUERS
    return {
        "idle_workers": workers,
        "one_at_a_time": {"runs": samples, "claims": one_at_a_time, "claims_per_run": round(one_at_a_time / samples, 2)},
        "burst": {"runs": runs, "claims": burst_claims, "claims_per_run": round(burst_claims / runs, 2),
                  "seconds": round(burst_s, 1)},
        "pickup": summary(to_start),
    }


async def _settle(server: BenchServer, database: str, procs: Sequence[Any]) -> None:
    """Until no claim comes for a second: every worker made its start-up claims."""
    last = -1

    async def quiet() -> bool:
        nonlocal last
        now = await _claims(server, database)
        same, last = now == last, now
        return same

    await wait_for(quiet, timeout_s=300, what="the start-up claims", every_s=1.0, watch=procs)
