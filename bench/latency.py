"""Pickup latency: one idle worker, one run at a time, enqueue commit → agent start.

The client stamps ``time.time()`` when the enqueue's COMMIT returns; the stamp agent
returns ``time.time()`` when the runtime starts it; same host, same clock. The claim's own
``run.started`` event (its ``created_at`` is the claim transaction's ``now()``) splits the
interval into wake-up + claim, and claim → agent start.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from app.db.engine import create_engine
from app.queue import EVENTS_CHANNEL, NewRun, Queue
from bench.procs import APP_NAME, children, connect, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary
from bench.throughput import WORKER_READY, worker_argv, worker_env

AGENTS = "stamp=bench.agents:StampAgent"
COMPLETED_SEQ = 3  # run.queued, run.started, run.completed


async def pickup(server: BenchServer, *, samples: int, gap_s: float = 0.02) -> dict[str, Any]:
    async with server.database("pickup") as url:
        engine = create_engine(url, pool_size=2, application_name=APP_NAME)
        queue = Queue(engine)
        finished: dict[uuid.UUID, asyncio.Event] = {}

        def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            run_id, _, seq = payload.partition(":")
            if int(seq) >= COMPLETED_SEQ:
                finished.setdefault(uuid.UUID(run_id), asyncio.Event()).set()

        env = worker_env(url, RUNQ_AGENTS=AGENTS)
        try:
            async with children([worker_argv(4)], env=env) as procs, connect(url) as conn:
                await conn.add_listener(EVENTS_CHANNEL, notified)
                await wait_for_workers(url, 1, sessions=WORKER_READY, watch=procs)
                to_start, to_claim, committed = [], [], {}
                for _ in range(samples):
                    run, _ = await queue.enqueue(NewRun(tenant_id="bench", agent="stamp", input={}))
                    committed[run.id] = time.time()
                    done = finished.setdefault(run.id, asyncio.Event())
                    await asyncio.wait_for(done.wait(), 10)
                    await asyncio.sleep(gap_s)
                rows = await conn.fetch(
                    "SELECT r.id, (r.output->>'started_at')::float8 AS started,"
                    " extract(epoch FROM e.created_at) AS claimed FROM agent_runs r"
                    " JOIN run_events e ON e.run_id = r.id AND e.type = 'run.started'"
                )
                for row in rows:
                    to_start.append(row["started"] - committed[row["id"]])
                    to_claim.append(float(row["claimed"]) - committed[row["id"]])
        finally:
            await engine.dispose()
    return {**summary(to_start), "claim_tx_start": summary(to_claim)}
