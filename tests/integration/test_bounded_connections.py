"""A worker holds at most its configured pool, however many runs stream at once, and a failed
event write never shows text twice.

Its own embedded PostgreSQL with a low ``max_connections``: a worker whose pool grew with its
run slots (as it did, up to twice ``--concurrency + 2``) would be refused connections here and
retry its runs, showing their text twice. Bounded, the runs' event writes share one statement
per tick on the pool's few connections, and every run ends ``done`` at attempt 1 with each delta
once, also when the statement carrying them dies with its backend.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.db.embedded import EmbeddedPostgres
from app.db.engine import create_engine
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn
from app.domain import Status
from app.errors import DatabaseUnavailable
from app.queue import NewRun, Queue
from tests.fakes import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply

ROOT = Path(__file__).resolve().parents[2]
MAX_CONNECTIONS = 10  # this test's sessions (2) + the worker's (pool + LISTEN + heartbeat)
POOL_SIZE = 2
RUNS = 16  # streaming at once, each writing its deltas every 50 ms
TEXT = "".join(f"{i:03d}," for i in range(200))  # 800 characters, streamed 2 at a time


@pytest.fixture(scope="module")
def low_limit_url() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="runq-test-bounded-", dir="/tmp"))
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "pgdata", fast=True, max_connections=MAX_CONNECTIONS)
    try:
        url = server.start()
        upgrade(url)
        yield url
    finally:
        server.stop()


@pytest.fixture
async def queue(low_limit_url: str) -> AsyncIterator[Queue]:
    engine = create_engine(low_limit_url, pool_size=1)
    try:
        yield Queue(engine)
    finally:
        await engine.dispose()


async def _worker_sessions(url: str, peak: list[int], stop: asyncio.Event) -> None:
    """The largest number of the worker's pooled sessions seen at once."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        while not stop.is_set():
            count = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'runq-worker'"
            )
            peak.append(count)
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


def _worker_env(url: str, model: FakeOpenAI) -> dict[str, str]:
    return os.environ | {
        "RUNQ_DATABASE_URL": url,
        "RUNQ_DB_POOL_SIZE": str(POOL_SIZE),
        "RUNQ_OPENAI_BASE_URL": model.base_url,
        "RUNQ_POLL_S": "0.1",
        "RUNQ_SHUTDOWN_GRACE_S": "1",
    }


async def _start_worker(url: str, model: FakeOpenAI, log_path: Path, concurrency: int) -> asyncio.subprocess.Process:
    with log_path.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "app.worker", "--concurrency", str(concurrency)),
            cwd=ROOT,
            env=_worker_env(url, model),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _each_streamed_once(queue: Queue, ids: list[uuid.UUID], log_text: str) -> None:
    """Every run done at attempt 1, its deltas the whole text once, matching message.completed."""
    for run_id in ids:
        run = await queue.get_run(run_id, tenant_id=None)
        assert (run.status, run.attempts) == (Status.DONE, 1), log_text[-2000:]
        events = await queue.read_events(run_id)
        deltas = "".join(e.data["text"] for e in events if e.type == "message.delta")
        completed = [e.data["text"] for e in events if e.type == "message.completed"]
        assert deltas == TEXT
        assert completed == [TEXT]
        assert [e.type for e in events].count("run.started") == 1
        assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_more_streaming_runs_than_pooled_connections(
    low_limit_url: str, queue: Queue, tmp_path: Path
) -> None:
    with FakeOpenAI() as model:
        model.script(*[Reply(text=TEXT, piece=2)] * RUNS)
        ids = [
            (await queue.enqueue(NewRun(tenant_id="t1", agent="openai", input={"prompt": "go"})))[0].id
            for _ in range(RUNS)
        ]
        peak: list[int] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_worker_sessions(low_limit_url, peak, stop))
        worker = await _start_worker(low_limit_url, model, tmp_path / "worker.log", RUNS)
        try:

            async def all_leased_at_once() -> bool:
                stats = await queue.stats()
                return stats.by_status.get(Status.LEASED.value, 0) == RUNS

            # One claim fills every slot: all the runs stream at the same time.
            await eventually(all_leased_at_once, within_s=30)
            await eventually(lambda: _all_finished(queue, ids), within_s=60)
        finally:
            stop.set()
            await sampler
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 15)
    log_text = (tmp_path / "worker.log").read_text(errors="replace")
    assert "too many clients" not in log_text
    assert max(peak) <= POOL_SIZE
    await _each_streamed_once(queue, ids, log_text)


async def _all_finished(queue: Queue, ids: list[uuid.UUID]) -> bool:
    runs = [await queue.get_run(run_id, tenant_id=None) for run_id in ids]
    return all(run.is_terminal for run in runs)


async def test_an_event_write_whose_backend_dies_is_retried_without_restarting_the_stream(
    low_limit_url: str, queue: Queue, tmp_path: Path
) -> None:
    runs = 4
    midway = threading.Event()
    with FakeOpenAI() as model:
        model.script(*[Reply(text=TEXT, piece=2, midway=midway)] * runs)
        ids = [
            (await queue.enqueue(NewRun(tenant_id="t1", agent="openai", input={"prompt": "go"})))[0].id
            for _ in range(runs)
        ]
        worker = await _start_worker(low_limit_url, model, tmp_path / "worker.log", runs)
        locker = await asyncpg.connect(asyncpg_dsn(low_limit_url))
        try:

            async def each_streaming() -> bool:
                types = [[e.type for e in await queue.read_events(run_id)] for run_id in ids]
                return all("message.delta" in run_types for run_types in types)

            await eventually(each_streaming, within_s=30)  # every stream paused halfway
            # The next event statement of the worker carries every run and waits on this lock;
            # its backend is then terminated: the statement fails, nothing of it committed.
            lock = locker.transaction()
            await lock.start()
            await locker.execute("SELECT 1 FROM agent_runs WHERE id = $1 FOR UPDATE", ids[0])
            midway.set()

            async def writer_waiting() -> list[int]:
                return [
                    r["pid"]
                    for r in await locker.fetch(
                        "SELECT pid FROM pg_stat_activity"
                        " WHERE application_name = 'runq-worker' AND wait_event_type = 'Lock'"
                    )
                ]

            [pid] = await eventually(writer_waiting, within_s=30)
            assert await locker.fetchval("SELECT pg_terminate_backend($1)", pid)
            await lock.rollback()
            await eventually(lambda: _all_finished(queue, ids), within_s=60)
        finally:
            midway.set()
            await locker.close()
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 15)
    log_text = (tmp_path / "worker.log").read_text(errors="replace")
    assert f"runq-events: {runs} runs not written" in log_text
    assert len(model.requests) == runs  # no model stream started again
    await _each_streamed_once(queue, ids, log_text)


async def test_a_checkout_waits_for_the_pool_then_fails_as_unavailable(low_limit_url: str) -> None:
    engine = create_engine(low_limit_url, pool_size=1, pool_timeout_s=0.2)
    waits = REGISTRY.get_sample_value("runq_db_pool_wait_seconds_count") or 0.0
    timeouts = REGISTRY.get_sample_value("runq_db_pool_timeouts_total") or 0.0
    try:
        async with engine.connect() as held:
            with pytest.raises(DatabaseUnavailable, match="RUNQ_DB_POOL_SIZE"):
                async with engine.connect():
                    pass  # never reached: the only connection is held
            assert (await held.execute(text("SELECT 1"))).scalar_one() == 1
        async with engine.connect() as conn:  # the same connection, free again
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
        assert engine.sync_engine.pool.checkedin() == 1
    finally:
        await engine.dispose()
    assert REGISTRY.get_sample_value("runq_db_pool_wait_seconds_count") == waits + 1
    assert REGISTRY.get_sample_value("runq_db_pool_timeouts_total") == timeouts + 1
