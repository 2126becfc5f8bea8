"""Capacity: what one run costs the database, measured, and what 10M runs a day would need.

``python -m bench.capacity measure [--runs N]`` runs a batch of demo runs (prompt, 3 steps, a
checkpoint per step: the shape docs/scaling.md plans for) through a real worker on an embedded
PostgreSQL with default durability (fsync, full_page_writes on) and writes, per run: WAL bytes
(``pg_current_wal_lsn`` deltas), bytes of every table and its indexes
(``pg_total_relation_size``), rows, commits. ``python -m bench.capacity simulate [--runs-per-day
N]`` feeds those figures (bench/results/capacity.json) into a day at that volume: rows, WAL and
storage per day, the retained total, peak rates, connections, partition sizes; docs/scaling.md
is written from its output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from app.db.engine import create_engine
from app.queue import Queue
from bench.procs import ROOT, children, connect, wait_for, wait_for_workers
from bench.server import BenchServer
from bench.throughput import WORKER_READY, worker_argv, worker_env

RESULTS = ROOT / "bench" / "results" / "capacity.json"
DEMO = {"prompt": "plan the next step of the migration and report back", "steps": 3, "step_s": 0.05}
TABLES = ("agent_runs", "run_events", "run_checkpoints", "run_effects", "run_subscribers", "webhook_deliveries")
SIZES = "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c WHERE c.relname = $1 OR c.oid IN" \
        " (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1))"


async def measure(runs: int) -> dict[str, Any]:
    with BenchServer.open() as server:
        async with server.database("capacity") as url, children([worker_argv(16)], env=worker_env(url)) as procs:
            await wait_for_workers(url, 1, sessions=WORKER_READY, watch=procs)
            async with connect(url) as conn:
                await conn.execute("CHECKPOINT")  # full-page images counted from a checkpoint on
                before = await _snapshot(conn)
                engine = create_engine(url, pool_size=1)
                try:
                    await Queue(engine).enqueue_many(tenant_id="capacity", agent="demo", inputs=[DEMO] * runs)
                finally:
                    await engine.dispose()
                started = time.monotonic()

                async def drained() -> bool:
                    return bool(await conn.fetchval("SELECT count(*) = 0 FROM agent_runs WHERE status <> 'done'"))

                await wait_for(drained, timeout_s=600, what="the batch", every_s=0.2, watch=procs)
                seconds = time.monotonic() - started
                await conn.execute("VACUUM")  # dead versions of the run rows reclaimed, as autovacuum would
                after = await _snapshot(conn)
                server_info = await server.describe()
    per_run = {k: round((after[k] - before[k]) / runs, 1) for k in after if isinstance(after[k], int | float)}
    return {
        "runs": runs,
        "demo_input": DEMO,
        "seconds": round(seconds, 1),
        "per_run": per_run,
        "server": {k: server_info[k] for k in ("server_version", "fsync", "full_page_writes", "shared_buffers")},
    }


async def _snapshot(conn: Any) -> dict[str, float]:
    snap: dict[str, float] = {
        "wal_bytes": float(await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")),
        "commits": float(await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")),
        "events": float(await conn.fetchval("SELECT count(*) FROM run_events")),
    }
    for table in TABLES:
        snap[f"{table}_bytes"] = float(await conn.fetchval(SIZES, table) or 0)
    return snap


def simulate(measured: dict[str, Any], *, runs_per_day: float, retention_days: float, peak_factor: float,
             run_s: float, slots_per_worker: int, apis: int, worker_pool: int, api_pool: int) -> dict[str, Any]:
    """A day at ``runs_per_day`` from the measured per-run costs: a flat day has the mean rate,
    the busiest hour ``peak_factor`` times it; every run lasts ``run_s`` (slots in use = rate x
    duration, Little's law), ``slots_per_worker`` to a worker process."""
    cost = measured["per_run"]
    mean_rps = runs_per_day / 86400
    peak_rps = mean_rps * peak_factor
    events_per_run = cost["events"]
    day_bytes = {t: cost[f"{t}_bytes"] * runs_per_day for t in TABLES}
    wal_day = cost["wal_bytes"] * runs_per_day
    retained_runs = runs_per_day * (retention_days + 2)  # retention by day: up to two days more
    storage = sum(day_bytes.values()) * (retention_days + 2)
    slots = math.ceil(peak_rps * run_s)
    workers = math.ceil(slots / slots_per_worker)
    # each process: its pool, plus a LISTEN session (and, for a worker, its heartbeat's)
    connections = workers * (worker_pool + 2) + apis * (api_pool + 1)
    return {
        "inputs": {"runs_per_day": runs_per_day, "retention_days": retention_days, "peak_factor": peak_factor,
                   "run_s": run_s, "slots_per_worker": slots_per_worker, "apis": apis, "worker_pool": worker_pool,
                   "api_pool": api_pool},
        "rates": {
            "runs_per_s_mean": round(mean_rps, 1),
            "runs_per_s_peak": round(peak_rps, 1),
            "events_per_s_peak": round(peak_rps * events_per_run),
            "commits_per_s_peak": round(peak_rps * cost["commits"]),
            "wal_mb_per_s_peak": round(peak_rps * cost["wal_bytes"] / 1e6, 2),
        },
        "per_day": {
            "runs": runs_per_day,
            "event_rows": round(runs_per_day * events_per_run),
            "wal_gb": round(wal_day / 1e9, 1),
            "table_gb": {t: round(b / 1e9, 2) for t, b in day_bytes.items() if b},
            "event_partition_gb": round(day_bytes["run_events"] / 1e9, 1),
        },
        "retained": {"runs": round(retained_runs), "storage_gb": round(storage / 1e9), "partitions": int(retention_days + 2 + 3)},
        "slots_in_use_at_peak": slots,
        "worker_processes": workers,
        "connections_direct": connections,
        "listen_sessions": workers + apis,
        "pgbouncer_client_connections": workers * (worker_pool + 1) + apis * api_pool,
    }


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="per-run WAL, bytes, rows and commits of a batch of demo runs")
    m.add_argument("--runs", type=int, default=2000)
    s = sub.add_parser("simulate", help="a day at the given volume from bench/results/capacity.json")
    s.add_argument("--runs-per-day", type=float, default=10_000_000)
    s.add_argument("--retention-days", type=float, default=30)
    s.add_argument("--peak-factor", type=float, default=3.0, help="busiest hour / mean")
    s.add_argument("--run-s", type=float, default=60.0, help="how long a run lasts")
    s.add_argument("--slots-per-worker", type=int, default=64)
    s.add_argument("--apis", type=int, default=8)
    s.add_argument("--worker-pool", type=int, default=4)
    s.add_argument("--api-pool", type=int, default=10)
    return parser.parse_args()


def main() -> None:
    args = _args()
    if args.command == "measure":
        out = asyncio.run(measure(args.runs))
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    else:
        measured = json.loads(Path(RESULTS).read_text())
        out = simulate(measured, runs_per_day=args.runs_per_day, retention_days=args.retention_days,
                       peak_factor=args.peak_factor, run_s=args.run_s, slots_per_worker=args.slots_per_worker, apis=args.apis,
                       worker_pool=args.worker_pool, api_pool=args.api_pool)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
