"""The rounds of ``make failover``: runq's processes on the pair's host list, load, a fault,
and what the clients and the database say afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
import httpx

from app.api.keys import create_key
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn
from bench.failover import figures
from bench.failover.load import Load
from bench.failover.patroni import Node, Pair
from bench.procs import PYTHON, children, wait_for
from bench.server import free_port

Fault = Literal["kill", "switchover"]
DATABASE = "runq"
TENANT = "failover"
# The default lease (30 s) and heartbeat (10 s): a failover of ~10-15 s is shorter than the
# lease, so it must start no run twice.
RUNQ_ENV = {"RUNQ_LOG_FORMAT": "json", "RUNQ_SHUTDOWN_GRACE_S": "5", "RUNQ_DB_POOL_SIZE": "5"}
WARMUP_S = 5.0  # load before the fault
AFTER_S = 10.0  # load after writes are accepted again
PROBE = "INSERT INTO failover_probe VALUES (now())"


@dataclass(frozen=True, slots=True)
class Runq:
    url: str
    key: str
    apis: list[str]


async def prepare(pair: Pair) -> str:
    """The ``runq`` database on the leader, migrated through the host list; runq's URL."""
    await wait_for(lambda: _true(pair.leader() is not None and pair.standby() is not None),
                   timeout_s=120, what="a leader and its standby", every_s=0.5)  # fmt: skip
    leader = pair.leader()
    assert leader is not None
    conn = await asyncpg.connect(_direct(leader, "postgres"))
    try:
        await conn.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await conn.close()
    # asyncpg tries the next host only when one cannot be reached: a standby that has not yet
    # replayed the CREATE DATABASE refuses the session, so wait until every node has it.
    await wait_for(lambda: _everywhere(pair, DATABASE), timeout_s=60, what="the database on both nodes")
    url = f"postgresql://postgres@{pair.hosts}/{DATABASE}?target_session_attrs=read-write"
    await asyncio.to_thread(upgrade, url)
    conn = await asyncpg.connect(_direct(leader, DATABASE))
    try:
        await conn.execute("CREATE TABLE failover_probe (at timestamptz)")
    finally:
        await conn.close()
    return url


@asynccontextmanager
async def runq(url: str) -> AsyncIterator[Runq]:
    """Two APIs and two workers on the host list."""
    ports = [free_port(), free_port()]
    apis = [
        [PYTHON, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log"]
        for port in ports
    ]  # fmt: skip
    workers = [[PYTHON, "-m", "app.worker", "--concurrency", "16"] for _ in range(2)]
    async with AsyncExitStack() as stack:
        started = await stack.enter_async_context(children(apis + workers, env=RUNQ_ENV | {"RUNQ_DATABASE_URL": url}))
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        await wait_for(lambda: _all_ready(bases), timeout_s=60, what="the APIs", every_s=0.2, watch=started)
        yield Runq(url, await create_key(url, tenant_id=TENANT), bases)


async def one_round(pair: Pair, r: Runq, fault: Fault) -> dict[str, Any]:
    """Load, the fault, load until AFTER_S past the new primary taking writes; the figures."""
    load = Load(r.apis, r.key)
    loading = asyncio.create_task(load.run(creators=3, every_s=0.3, follow_every=3))
    await asyncio.sleep(WARMUP_S)
    old = pair.leader()
    assert old is not None
    new = next(n for n in pair.nodes if n is not old)
    fault_at = time.time()
    if fault == "kill":
        pair.kill(old)
    else:
        await asyncio.to_thread(pair.switchover, to=new)
    promoted_at = await wait_for(lambda: _true(pair.leader() is new), timeout_s=120, what="the new leader", every_s=0.1)
    if fault == "kill":
        pair.revive(old)  # as its supervisor would: it rejoins as the standby the strict mode waits for
    writable_at = await wait_for(lambda: _writable(new), timeout_s=180, what="a commit on the new primary", every_s=0.05)
    ready_at = await wait_for(lambda: _all_ready(r.apis), timeout_s=60, what="/readyz", every_s=0.05)
    await asyncio.sleep(AFTER_S)
    load.stop()
    await loading
    created_at = min((t for t in load.acknowledged.values() if t >= writable_at), default=None)
    timeline = figures.Timeline(fault_at, promoted_at, writable_at, created_at, ready_at)
    return await _figures(r.url, load, timeline) | {"fault": fault, "from": old.name, "to": new.name}


async def _figures(url: str, load: Load, timeline: figures.Timeline) -> dict[str, Any]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        ids = list(load.acknowledged)
        stored = {str(r["id"]) for r in await conn.fetch("SELECT id FROM agent_runs WHERE id = ANY($1::uuid[])", ids)}
        starts = {
            str(r["run_id"]): r["n"]
            for r in await conn.fetch(
                "SELECT run_id, count(*) AS n FROM run_events WHERE type = 'run.started'"
                " AND run_id = ANY($1::uuid[]) GROUP BY run_id",
                ids,
            )
        }
        followed = [s.run_id for s in load.streams]
        events: dict[str, dict[int, str]] = {}
        for row in await conn.fetch(
            "SELECT run_id, seq, type FROM run_events WHERE run_id = ANY($1::uuid[])", followed
        ):
            events.setdefault(str(row["run_id"]), {})[row["seq"]] = row["type"]
    finally:
        await conn.close()
    return figures.recovery(timeline) | {
        "in_flight": figures.in_flight_back(load.streams, fault_at=timeline.fault_at, writable_at=timeline.writable_at),
        "acknowledged": len(ids),
        "acknowledged_but_lost": figures.acknowledged_but_lost(ids, stored),
        "seen_but_lost": figures.seen_but_lost(load.streams, events),
        "started_twice": figures.started_twice(starts),
        "streams": figures.streams_summary(load.streams),
        "status_5xx": sum(n for code, n in load.statuses.items() if code >= 500 and code != 503),
        "status_503": load.statuses.get(503, 0),
        "statuses": {str(code): n for code, n in sorted(load.statuses.items())},
    }


def _direct(node: Node, database: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{node.pg_port}/{database}"


async def _everywhere(pair: Pair, database: str) -> bool:
    for node in pair.nodes:
        try:
            conn = await asyncpg.connect(_direct(node, database))
        except (OSError, asyncpg.PostgresError):
            return False
        await conn.close()
    return True


async def _writable(node: Node) -> bool:
    """A commit on ``node`` returned: with the strict synchronous mode, the standby has it too."""
    try:
        async with asyncio.timeout(1.0):
            conn = await asyncpg.connect(_direct(node, DATABASE))
            try:
                await conn.execute(PROBE)
            finally:
                conn.terminate()
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False
    return True


async def _all_ready(apis: list[str]) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=1.0) as client:
            answers = await asyncio.gather(*(client.get(f"{api}/readyz") for api in apis))
            return all(a.status_code == 200 for a in answers)
    return False


async def _true(value: bool) -> bool:
    return value
