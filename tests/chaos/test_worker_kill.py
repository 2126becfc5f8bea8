"""Three workers, 300 demo runs (RUNQ_CHAOS_RUNS), a worker SIGKILLed every 1-2 s and restarted."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import TERMINAL, Event, Status
from app.queue import Queue
from tests.chaos.conftest import SpawnWorker, WorkerProcess
from tests.worker_support import check_event_log, enqueue_demo

pytestmark = pytest.mark.chaos

RUNS = int(os.environ.get("RUNQ_CHAOS_RUNS", "300"))  # `make chaos` asks for more
WORKERS = 3
MAX_ATTEMPTS = 6
MAX_KILLS = max(RUNS // 20, 5)  # each restart costs a second of CPU: CI has two cores


async def unfinished(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                text("SELECT count(*) FROM agent_runs WHERE status IN ('pending', 'leased')")
            )
        ).scalar_one()


async def test_sigkill_chaos_keeps_every_invariant(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine
) -> None:
    rng = random.Random(3)
    for i in range(RUNS):
        await enqueue_demo(
            queue,
            prompt=f"run {i}" if i % 10 == 0 else "",
            steps=rng.choice([2, 3]),
            step_s=rng.choice([0.05, 0.1, 0.15]),
            fail_attempts=1 if i % 5 == 0 else 0,
            max_attempts=MAX_ATTEMPTS,
        )
    workers: list[WorkerProcess] = [spawn_worker(concurrency=4) for _ in range(WORKERS)]

    kills = 0
    deadline = time.monotonic() + 60 + RUNS * 0.25
    next_kill = time.monotonic() + rng.uniform(1, 2)
    while await unfinished(engine):
        assert time.monotonic() < deadline, f"runs still unfinished after {kills} kills"
        if time.monotonic() >= next_kill and kills < MAX_KILLS:
            victim = rng.randrange(WORKERS)
            workers[victim].sigkill()
            workers[victim] = spawn_worker(concurrency=4, ready=False)
            kills += 1
            next_kill = time.monotonic() + rng.uniform(1, 2)
        await asyncio.sleep(0.1)
    assert kills >= 5, "the runs finished before the chaos really started"

    runs = await queue.list_runs(tenant_id=None, limit=RUNS + 1)
    assert len(runs) == RUNS
    assert all(run.status in TERMINAL for run in runs)
    for run in runs:
        if run.status is not Status.DONE:
            assert run.status is Status.DEAD and run.attempts >= run.max_attempts, run

    events: dict[object, list[Event]] = defaultdict(list)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT run_id, seq, type, data, attempt, created_at FROM run_events ORDER BY run_id, seq"
            )
        )
        for row in rows:
            events[row.run_id].append(
                Event(
                    seq=row.seq,
                    type=row.type,
                    data=row.data,
                    attempt=row.attempt,
                    created_at=row.created_at,
                )
            )
    for run in runs:
        check_event_log(events[run.id])
    retried = sum(1 for run in runs if run.attempts > 1)
    print(
        f"{kills} kills, {retried} runs retried, {sum(r.status is Status.DONE for r in runs)} done"
    )
