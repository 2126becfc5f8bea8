"""Threads under SIGKILL: three workers, 12 threads of 5 demo runs each, a worker killed every
0.7-1.5 s and restarted. Every thread's runs still execute one at a time in creation order, and
every history holds each run's two messages exactly once, in order."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Status, Strategy
from app.queue import NewRun, Queue
from tests.chaos.conftest import SpawnWorker, WorkerProcess

pytestmark = pytest.mark.chaos

THREADS = 12
RUNS_PER_THREAD = 5
WORKERS = 3
MAX_KILLS = 8
# An event's created_at is its statement's now(), taken before the statement is planned and its
# snapshot taken: on a loaded machine a claim's now() can precede, by milliseconds, the ending it
# already saw committed. Two runs of one thread leased at once would overlap by a whole attempt
# (five steps of 0.15 s and more), far beyond this.
CLOCK_SLACK = timedelta(milliseconds=100)


async def unfinished(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return (
            await conn.execute(text("SELECT count(*) FROM agent_runs WHERE status NOT IN ('done', 'dead', 'cancelled')"))
        ).scalar_one()


async def test_threads_keep_their_order_and_their_histories_under_sigkill(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine
) -> None:
    rng = random.Random(16)
    threads = [(await queue.create_thread(tenant_id="t1", metadata={}))[0].id for _ in range(THREADS)]
    prompts: dict[object, list[str]] = defaultdict(list)
    order: dict[object, list[object]] = defaultdict(list)
    for n in range(RUNS_PER_THREAD):  # interleaved across threads, as users would send them
        for t, thread_id in enumerate(threads):
            prompt = f"thread {t} message {n}"
            input = {"prompt": prompt, "steps": 5, "step_s": rng.choice([0.15, 0.25]), "fail_attempts": int(n == 1)}
            new = NewRun(tenant_id="t1", agent="demo", input=input, max_attempts=12)
            run, _, _ = await queue.enqueue_in_thread(thread_id, new, strategy=Strategy.ENQUEUE)
            prompts[thread_id].append(prompt)
            order[thread_id].append(run.id)
    workers: list[WorkerProcess] = [spawn_worker(concurrency=4, ready=False) for _ in range(WORKERS)]
    for worker in workers:  # started together: the chaos begins while the threads are young
        worker.wait_ready()

    kills = 0
    deadline = time.monotonic() + 150
    next_kill = time.monotonic() + rng.uniform(0.7, 1.5)
    while await unfinished(engine):
        assert time.monotonic() < deadline, f"runs still unfinished after {kills} kills"
        if time.monotonic() >= next_kill and kills < MAX_KILLS:
            victim = rng.randrange(WORKERS)
            workers[victim].sigkill()
            workers[victim] = spawn_worker(concurrency=4, ready=False)
            kills += 1
            next_kill = time.monotonic() + rng.uniform(0.7, 1.5)
        await asyncio.sleep(0.1)
    assert kills >= 4, "the runs finished before the chaos really started"

    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT run_id, min(created_at) FILTER (WHERE type = 'run.started') AS first_start,"
                " max(created_at) AS last_event FROM run_events GROUP BY run_id"
            )
        )
        spans: dict[object, tuple[datetime, datetime]] = {r.run_id: (r.first_start, r.last_event) for r in rows}
    for thread_id in threads:
        runs = [await queue.get_run(run_id, tenant_id="t1") for run_id in order[thread_id]]
        assert [r.status for r in runs] == [Status.DONE] * RUNS_PER_THREAD, [(r.status, r.error_code) for r in runs]
        # each run started only after every event of the run before it: never two at once, in order
        for earlier, later in zip(order[thread_id], order[thread_id][1:], strict=False):
            assert spans[earlier][1] <= spans[later][0] + CLOCK_SLACK, (earlier, later)
        messages = await queue.thread_messages(thread_id, tenant_id="t1", limit=1000)
        expected = [
            {"role": role, "content": prompt} for prompt in prompts[thread_id] for role in ("user", "assistant")
        ]
        assert [m.message for m in messages] == expected, thread_id
        assert [m.index for m in messages] == list(range(len(expected)))
        assert [m.run_id for m in messages] == [run_id for run_id in order[thread_id] for _ in range(2)]
        assert [r.output["thread_messages"] for r in runs] == [2 * n for n in range(RUNS_PER_THREAD)]
