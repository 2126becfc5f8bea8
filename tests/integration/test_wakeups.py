"""Wake-ups without a herd: a new run wakes about as many idle workers as it needs.

``runq_wake_workers()`` (migration 0012) picks workers with free slots from the registry and
notifies their own channels; it broadcasts only when the registry shows too few free slots.
The fleet tests count claim statements from ``pg_stat_statements``, on an embedded server of
this module's own: the extension needs ``shared_preload_libraries``, which the session's
server (or the one named by RUNQ_TEST_DATABASE_URL) may not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.embedded import EmbeddedPostgres
from app.db.engine import create_engine
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn
from app.domain import WorkerInfo
from app.queue import NewRun, Queue, channels
from tests.conftest import TABLES
from tests.worker_support import in_process_worker, wait_until

IDLE_WORKERS = 32
# Claim statements, capped or not, by their first line (pg_stat_statements keeps the text).
CLAIMS = "(query LIKE 'WITH picked AS%' OR query LIKE 'WITH inflight AS%')"
FLEET = {"lease_s": 10.0, "heartbeat_s": 1.0, "reaper_s": 5.0, "db_pool_size": 2}


@pytest.fixture(scope="module")
def stats_url() -> Iterator[str]:
    """A migrated database on a server with pg_stat_statements loaded."""
    root = Path(tempfile.mkdtemp(prefix="runq-test-stats-", dir="/tmp"))
    root.chmod(0o755)
    server = EmbeddedPostgres(
        root / "pgdata", fast=True, max_connections=400,
        settings={"shared_preload_libraries": "pg_stat_statements"},
    )
    try:
        url = make_url(server.start()).set(database="runq").render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def stats(stats_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(asyncpg_dsn(stats_url))
    await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    await conn.execute(f"TRUNCATE {TABLES}")
    await conn.execute("SELECT pg_stat_statements_reset()")
    try:
        yield conn
    finally:
        await conn.close()


async def claim_statements(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            f" WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND {CLAIMS}"
        )
    )


@contextlib.asynccontextmanager
async def idle_fleet(url: str, conn: asyncpg.Connection, **settings: float) -> AsyncIterator[None]:
    """``IDLE_WORKERS`` in-process workers of one slot each, registered and listening."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(IDLE_WORKERS):
            # LISTEN on this server too, whatever RUNQ_LISTEN_DATABASE_URL says (RUNQ_TEST_PGBOUNCER=1
            # points it at the session's server)
            worker = in_process_worker(url, concurrency=1, listen_database_url=url, **(FLEET | settings))
            await stack.enter_async_context(worker)

        async def ready() -> bool:
            registered = await conn.fetchval("SELECT count(*) FROM workers WHERE wake_channel IS NOT NULL")
            listening = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'runq-listen'"
                " AND datname = current_database()"
            )
            return bool(registered == listening == IDLE_WORKERS)

        await wait_until(ready, within=60, what=f"{IDLE_WORKERS} idle workers")
        await wait_until(lambda: settled(conn), within=30, what="the start-up claims")
        yield


async def settled(conn: asyncpg.Connection) -> bool:
    """Every worker made its start-up claims (one as it starts, one once its LISTEN is up) and
    none came within half a second: they all wait for a wake-up."""
    before = await claim_statements(conn)
    await asyncio.sleep(0.5)
    return before >= IDLE_WORKERS and await claim_statements(conn) == before


async def finished(conn: asyncpg.Connection, runs: int) -> bool:
    return bool(await conn.fetchval("SELECT count(*) FROM agent_runs WHERE status = 'done'") == runs)


async def test_a_burst_is_claimed_with_about_one_claim_per_run(stats_url: str, stats: asyncpg.Connection) -> None:
    runs, enqueuers = 1000, 4
    engine = create_engine(stats_url, pool_size=enqueuers)
    queue = Queue(engine)
    try:
        async with idle_fleet(stats_url, stats):  # polling every second, as by default
            before = await claim_statements(stats)

            async def enqueue(n: int) -> None:
                for _ in range(n):
                    await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 0}))

            await asyncio.gather(*(enqueue(runs // enqueuers) for _ in range(enqueuers)))
            await wait_until(lambda: finished(stats, runs), within=120, what=f"{runs} runs done")
            claims = await claim_statements(stats) - before
    finally:
        await engine.dispose()
    # with every NOTIFY broadcast, each run cost up to one claim per idle worker
    assert claims <= 1.5 * runs, f"{claims} claim statements for {runs} runs"


async def test_one_run_at_a_time_wakes_one_worker(stats_url: str, stats: asyncpg.Connection) -> None:
    runs = 20
    engine = create_engine(stats_url, pool_size=1)
    queue = Queue(engine)
    try:
        # the poll out of the way: every claim counted here was caused by a wake-up
        async with idle_fleet(stats_url, stats, poll_s=60.0):
            before = await claim_statements(stats)
            for i in range(runs):
                await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 0}))
                await wait_until(lambda n=i + 1: finished(stats, n), within=10, what="the run done")
            claims = await claim_statements(stats) - before
    finally:
        await engine.dispose()
    # with every NOTIFY broadcast, each run cost one claim per idle worker
    assert claims <= 1.5 * runs, f"{claims} claim statements for {runs} runs"


async def listen(conn: asyncpg.Connection, names: list[str]) -> list[str]:
    heard: list[str] = []
    for name in names:
        await conn.add_listener(name, lambda _c, _pid, channel, _payload: heard.append(channel))
    return heard


async def test_the_registry_decides_whom_to_wake(queue: Queue, engine: AsyncEngine, direct_database_url: str) -> None:
    busy, one, two = WorkerInfo.start(slots=1), WorkerInfo.start(slots=1), WorkerInfo.start(slots=2)
    for worker in (busy, one, two):
        await queue.renew_leases({}, worker=worker)
    await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    await queue.claim_batch(worker_id=busy.worker_id, limit=1)  # its claim marks its one slot used
    [in_use] = [w.slots_in_use for w in await queue.list_workers() if w.worker_id == busy.worker_id]
    assert in_use == 1
    conn = await asyncpg.connect(asyncpg_dsn(direct_database_url))
    try:
        heard = await listen(conn, [channels.RUNS] + [channels.wake(w.worker_id) for w in (busy, one, two)])

        async def woken_by(runs: int) -> set[str]:
            heard.clear()
            async with engine.begin() as sa_conn:
                await sa_conn.exec_driver_sql(f"SELECT runq_wake_workers({runs})")
            await wait_until(lambda: heard, within=5, what="a wake-up")
            await asyncio.sleep(0.05)  # every NOTIFY of one commit arrives together
            return set(heard)

        for _ in range(10):  # one run: one worker with room, never the busy one
            assert len(woke := await woken_by(1)) == 1
            assert woke < {channels.wake(one.worker_id), channels.wake(two.worker_id)}
        # three runs: both workers with room (1 + 2 free slots)
        assert await woken_by(3) == {channels.wake(one.worker_id), channels.wake(two.worker_id)}
        assert await woken_by(4) == {channels.RUNS}  # more runs than registered free slots
    finally:
        await conn.close()


async def test_a_burst_while_every_worker_is_busy_is_claimed_as_they_free_up(
    stats_url: str, stats: asyncpg.Connection
) -> None:
    """No run stays pending while a worker sits idle: the burst's wake-ups reach workers with no
    free slot, and each claims again as its slot frees (the poll would take poll_s times the
    idle workers, minutes here)."""
    runs, enqueuers, poll_s, busy_s, run_s = 500, 4, 5.0, 3.0, 0.2
    engine = create_engine(stats_url, pool_size=enqueuers)
    queue = Queue(engine)

    async def nothing_pending() -> bool:
        return bool(await stats.fetchval("SELECT count(*) = 0 FROM agent_runs WHERE status = 'pending'"))

    try:
        async with idle_fleet(stats_url, stats, poll_s=poll_s):
            for _ in range(IDLE_WORKERS):
                await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 1, "step_s": busy_s}))
            await wait_until(nothing_pending, within=60, what="every worker busy")  # a precondition

            async def enqueue(n: int) -> None:
                for _ in range(n):
                    await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 1, "step_s": run_s}))

            await asyncio.gather(*(enqueue(runs // enqueuers) for _ in range(enqueuers)))
            # the issue's bound: the busy runs' end, the burst's share per worker, two polls
            bound = busy_s + runs / IDLE_WORKERS * run_s + 2 * poll_s
            await wait_until(nothing_pending, within=bound, what="the burst claimed")
    finally:
        await engine.dispose()


async def test_a_tail_whose_wakeups_went_astray_is_claimed_within_a_few_polls(
    stats_url: str, stats: asyncpg.Connection
) -> None:
    """Runs left when the wake-ups sent for them went astray (here: each reached a worker before
    its run was available, so the claim found nothing) are claimed by the workers that took runs
    next to them, each within a poll, not by the idle fleet's shared poll, one run per poll_s
    (IDLE_WORKERS x poll_s for each worker: minutes here)."""
    runs, poll_s = IDLE_WORKERS - 1, 5.0
    engine = create_engine(stats_url, pool_size=2)
    queue = Queue(engine)

    async def nothing_pending() -> bool:
        return bool(await stats.fetchval("SELECT count(*) = 0 FROM agent_runs WHERE status = 'pending'"))

    try:
        async with idle_fleet(stats_url, stats, poll_s=poll_s):
            for _ in range(runs):
                await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 0}, delay_s=1.0))
            await wait_until(
                lambda: stats.fetchval("SELECT count(*) = 0 FROM agent_runs WHERE available_at > now()"),
                within=10, what="the astray runs available",
            )  # fmt: skip
            for _ in range(runs):
                await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 0}))
            await wait_until(nothing_pending, within=4 * poll_s, what="the tail claimed")
    finally:
        await engine.dispose()


async def test_a_wakeup_for_a_slot_already_taken_is_passed_to_an_idle_worker(
    queue: Queue, engine: AsyncEngine, database_url: str, direct_database_url: str
) -> None:
    """A targeted wake-up reaching a worker whose slot is taken (two creates picked it before its
    claim) wakes a worker with room, instead of waiting for the busy one's run to end."""
    settings = {"poll_s": 60.0, "lease_s": 10.0, "heartbeat_s": 1.0, "listen_database_url": direct_database_url}

    async def scalar(query: str, *args: object) -> object:
        async with engine.begin() as conn:  # committed: a NOTIFY is sent at commit
            return (await conn.exec_driver_sql(query, args)).scalar()

    async with (
        in_process_worker(database_url, concurrency=1, **settings),
        in_process_worker(database_url, concurrency=1, **settings),
    ):
        listening = "SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name = 'runq-listen'"
        await wait_until(lambda: scalar(listening), within=30, what="two workers listening")
        long, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 1, "step_s": 30}))
        leased_by = "SELECT locked_by FROM agent_runs WHERE id = $1 AND status = 'leased'"
        busy = await wait_until(lambda: scalar(leased_by, long.id), within=10, what="the long run claimed")
        # a run the idle worker is woken for too early: its claim finds nothing, it goes back to
        # its poll (a minute); then a wake-up reaches the busy worker alone
        late, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}, delay_s=0.5))
        available = "SELECT available_at <= now() FROM agent_runs WHERE id = $1"
        await wait_until(lambda: scalar(available, late.id), within=5, what="the run available")
        await scalar("SELECT pg_notify(wake_channel, '') FROM workers WHERE worker_id = $1", busy)
        taker = await wait_until(lambda: scalar(leased_by, late.id), within=5, what="the run claimed")
        assert taker != busy
