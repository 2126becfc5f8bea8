"""What runq costs the database: statements per heartbeat interval for one worker holding 64
runs, the HOT ratio of heartbeats, and claim latency as finished history piles up.

Statements are counted with ``pg_stat_statements`` when the server has it (the embedded
server is restarted with it for this section); otherwise with committed transactions from
``pg_stat_database.xact_commit``, which the report names as the method used.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app.db.engine import create_engine
from app.db.url import async_url
from app.domain import Finish
from app.queue import CLAIM_BATCH, Queue
from bench import hot_updates
from bench.procs import APP_NAME, children, connect, wait_for, wait_for_workers
from bench.server import BenchServer
from bench.stats import summary
from bench.throughput import WORKER_READY, enqueue_backlog, worker_argv, worker_env

HELD = 64
SLEEPING = {"steps": 1, "step_s": 600}  # demo: one tool.call, then a long cancellable sleep
BEAT_MARK = "renewed AS"  # a fragment only the heartbeat statement (RENEW_LEASES) contains

PENDING_ROWS = (
    "WITH ins AS (INSERT INTO agent_runs (tenant_id, agent, max_attempts, input_json, last_event_seq)"
    " SELECT 'bench', 'demo', 3, '{\"steps\": 0}', 1 FROM generate_series(1, $1) RETURNING id, history_at)"
    " INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)"
    " SELECT id, 1, 'run.queued', '{}', 0, history_at FROM ins"
)
# History as a real table holds it: random v4 ids, three events each. The ids are sorted
# before the insert so that each chunk walks the indexes in key order; the indexes end up as
# large and as random as real history makes them, in a fraction of the load time.
FINISHED_ROWS = (
    "WITH ins AS (INSERT INTO agent_runs (id, tenant_id, agent, status, attempts, max_attempts,"
    " input_json, output, last_event_seq, available_at, queue_rank, created_at, updated_at, finished_at)"
    " SELECT g.id, 'bench', 'demo', 'done', 1, 3, '{\"steps\": 0}', '{}', 3, t, t, t, t, t"
    " FROM (SELECT now() - interval '1 day' AS t) AS ts,"
    " (SELECT gen_random_uuid() AS id FROM generate_series(1, $1) ORDER BY 1) AS g RETURNING id, history_at)"
    " INSERT INTO run_events (run_id, seq, type, data, attempt, history_at)"
    " SELECT id, s, (ARRAY['run.queued', 'run.started', 'run.completed'])[s], '{}', least(s - 1, 1), history_at"
    " FROM ins, generate_series(1, 3) AS s ORDER BY id, s"
)


async def heartbeat_statements(
    server: BenchServer, *, interval_s: float, intervals: int, statement_stats: bool
) -> dict[str, Any]:
    """One worker holding 64 sleeping runs; statements it sends per heartbeat interval."""
    async with server.database("cost_heartbeat") as url:
        env = worker_env(url, RUNQ_HEARTBEAT_S=str(interval_s), RUNQ_LEASE_S=str(max(5.0, interval_s * 5)))
        async with children([worker_argv(HELD)], env=env) as procs, connect(url) as conn:
            await wait_for_workers(url, 1, sessions=WORKER_READY, watch=procs)
            await enqueue_backlog(url, HELD, input=SLEEPING)

            async def all_sleeping() -> bool:
                # run.queued, run.started, tool.call: every agent is inside its sleep.
                return bool(
                    await conn.fetchval(
                        "SELECT count(*) FROM agent_runs WHERE status = 'leased' AND last_event_seq >= 3"
                    )
                    == HELD
                )

            await wait_for(all_sleeping, timeout_s=60, what="64 held runs", watch=procs)
            await asyncio.sleep(interval_s * 2)  # past the first renewals and the claim loop
            before = await _counters(server, conn, statement_stats)
            await asyncio.sleep(interval_s * intervals)
            after = await _counters(server, conn, statement_stats)
            hot = await _hot_delta(conn, before["tables"], HELD * (intervals - 1))
    window = (after["at"] - before["at"]) / interval_s
    result: dict[str, Any] = {
        "runs_held": HELD,
        "interval_s": interval_s,
        "intervals": round(window, 2),
        "method": "pg_stat_statements" if statement_stats else "pg_stat_database.xact_commit",
        "worker_heartbeat_hot_ratio": hot,
    }
    if statement_stats:
        calls = {q: after["calls"].get(q, 0) - before["calls"].get(q, 0) for q in after["calls"]}
        calls = {q: n for q, n in calls.items() if n > 0}
        beats = sum(n for q, n in calls.items() if BEAT_MARK in q)
        sql = {q: n for q, n in calls.items() if q.split()[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK")}
        result |= {
            "heartbeat_statements_per_interval": round(beats / window, 2),
            "sql_statements_per_interval": round(sum(sql.values()) / window, 2),
            "round_trips_per_interval": round(sum(calls.values()) / window, 2),
            "top_statements": [
                {"calls_per_interval": round(n / window, 2), "query": " ".join(q.split())[:100]}
                for q, n in sorted(calls.items(), key=lambda kv: -kv[1])[:8]
            ],
        }
    else:
        commits = after["commits"] - before["commits"] - 2  # the two counter reads themselves
        result["transactions_per_interval"] = round(commits / window, 2)
    return result


async def _counters(server: BenchServer, conn: Any, statement_stats: bool) -> dict[str, Any]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    out: dict[str, Any] = {"at": time.time()}
    out["tables"] = tuple(
        await conn.fetchrow("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agent_runs'")
    )
    if statement_stats:
        stats = await server.statement_stats(await conn.fetchval("SELECT current_database()"))
        out["calls"] = {q: n for q, (n, _) in stats.items() if "pg_stat" not in q and "current_database" not in q}
    else:
        out["commits"] = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    return out


async def _hot_delta(conn: Any, before: tuple[int, int], expected: int) -> float | None:
    """HOT share of the agent_runs updates since ``before`` (the heartbeats; nothing else
    updates those rows while the agents sleep). Backends report at most a second late."""
    for _ in range(40):
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        upd, hot = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'agent_runs'"
        )
        if upd - before[0] >= expected:
            break
        await asyncio.sleep(0.1)
    updates = upd - before[0]
    return round((hot - before[1]) / updates, 4) if updates else None


async def hot_ratio(server: BenchServer, *, rounds: int) -> dict[str, Any]:
    """bench/hot_updates.py on its own database. Unpooled connections: a backend flushes its
    table statistics when it exits, while an idle pooled one may hold them for 10 s."""
    async with server.database("cost_hot") as url:
        engine = create_async_engine(async_url(url), poolclass=NullPool)
        try:
            return await hot_updates.compare(engine, rounds=rounds)
        finally:
            await engine.dispose()


async def claim_latency(
    server: BenchServer, *, pending: int, small: int, large: int, samples: int
) -> dict[str, Any]:
    """``claim_batch(limit=1)`` round trips with ``small`` and ``large`` finished runs (three
    events each, as real history has) beside ``pending`` waiting runs.

    Two databases, one per history size, sampled alternately: a machine shared with other
    work drifts in speed, and alternation lets both sizes see the same drift.
    """
    async with server.database("cost_claim_small") as small_url, server.database("cost_claim_large") as large_url:
        load_s = {}
        for url, finished in ((small_url, small), (large_url, large)):
            started = time.perf_counter()
            async with connect(url) as conn:
                await _load(conn, PENDING_ROWS, pending)
                await _load(conn, FINISHED_ROWS, finished)
            load_s[finished] = round(time.perf_counter() - started, 1)
        engines = [create_engine(url, pool_size=2, application_name=APP_NAME) for url in (small_url, large_url)]
        queues = [Queue(engine) for engine in engines]
        latencies: tuple[list[float], list[float]] = ([], [])
        try:
            for i in range(samples):
                for side in (i % 2, 1 - i % 2):
                    started = time.perf_counter()
                    (claim,) = await queues[side].claim_batch(worker_id="bench", limit=1)
                    latencies[side].append(time.perf_counter() - started)
                    await queues[side].finish(run_id=claim.run.id, lease_id=claim.lease_id, finish=Finish.done({}))
        finally:
            for engine in engines:
                await engine.dispose()
        plans = []
        for url in (small_url, large_url):
            async with connect(url) as conn:
                plans.append(await _explain_claim(conn))
    first, second = summary(latencies[0]), summary(latencies[1])
    return {
        "pending": pending,
        "small": {"finished": small, **first, **plans[0]},
        "large": {"finished": large, **second, **plans[1]},
        "load_s": load_s,
        "ratio_p50": round(second["p50_ms"] / first["p50_ms"], 3),
        "ratio_server_execution": round(plans[1]["explain_execution_ms"] / plans[0]["explain_execution_ms"], 3),
    }


async def _load(conn: Any, statement: str, rows: int, *, chunk: int = 250_000) -> None:
    for start in range(0, rows, chunk):
        await conn.execute(statement, min(chunk, rows - start))
    await conn.execute("VACUUM ANALYZE agent_runs")
    await conn.execute("VACUUM ANALYZE run_events")


async def _explain_claim(conn: Any) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim, rolled back: server time and pages touched."""
    sql = str(CLAIM_BATCH).replace(":worker_id", "'bench'").replace(":limit", "1").replace(":lease_s", "30")
    tx = conn.transaction()
    await tx.start()
    try:
        raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
    finally:
        await tx.rollback()
    (plan,) = json.loads(raw)
    root = plan["Plan"]
    return {
        "explain_execution_ms": round(plan["Execution Time"], 3),
        "explain_planning_ms": round(plan["Planning Time"], 3),
        "explain_shared_hit": root.get("Shared Hit Blocks"),
        "explain_shared_read": root.get("Shared Read Blocks"),
    }
