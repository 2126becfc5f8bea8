"""Streaming at agent scale: N concurrent ``openai`` runs, each followed by one SSE subscriber.

The shape of issue 14: a fake OpenAI-compatible model (bench/model_server.py, a process of its
own) streams ``per_s`` timestamped tokens a second for ``seconds`` to every run; two worker
processes with enough slots for every run (``ceil(N / workers)`` each), one API process, one
PostgreSQL. The workers start idle; then N users arrive over one second, each creating its run
through the API (``POST /runs``) and following it at once (a real HTTP SSE client against the
API).

Each token carries its index and the time the model wrote it, so the subscriber tells from the
text alone what was lost, repeated or reordered (a retried attempt restarts the model's stream:
its text is seen twice) and how long a token took to reach it (model write → worker → event
row → NOTIFY → API → SSE frame received; one host, one clock; the 50 ms delta coalescing is in).

CPU is read from ``/proc`` for the API, the workers and the database's PostgreSQL backends
(bench/pg_observer.py), and for the harness (this process and the model server) apart, over the
whole window, from the first create to the last stream's end (creates, claims, subscriptions
and endings included); it is given per streaming run-second (N x seconds).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

from bench.api_server import Api, running_api
from bench.http import connection, json_body
from bench.model_server import parse_token
from bench.pg_observer import PgObserver, harness_cpu_s
from bench.procs import (
    PYTHON,
    Child,
    arriving,
    children,
    connect,
    machine_busy_s,
    wait_for,
    wait_for_workers,
)
from bench.server import BenchServer, free_port
from bench.stats import summary
from bench.throughput import WORKER_READY, worker_argv, worker_env

P99_TARGET_MS = 250.0
TOO_MANY = ("too many clients", "TooManyConnections")
CREATE = json_body({"agent": "openai", "input": {"prompt": "stream"}})


@dataclass
class Followed:
    """What one subscriber saw of its run."""

    run_id: uuid.UUID
    tokens: list[int] = field(default_factory=list)  # token indexes in the order received
    latencies_s: list[float] = field(default_factory=list)
    delta_text: list[str] = field(default_factory=list)
    completed_text: list[str] = field(default_factory=list)
    terminal: str | None = None
    error: str | None = None


@asynccontextmanager
async def model_server(*, per_s: float, seconds: float) -> AsyncIterator[tuple[str, Child]]:
    """The fake model's base URL (``/v1``) and its process."""
    port = free_port()
    argv = [PYTHON, "-m", "bench.model_server", "--port", str(port), "--per-s", str(per_s), "--seconds", str(seconds)]
    async with children([argv], env={}) as (child,):

        async def listening() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True

        await wait_for(listening, timeout_s=30, what="the model server", watch=[child])
        yield f"http://127.0.0.1:{port}/v1", child


async def sweep(
    server: BenchServer,
    *,
    runs: Sequence[int],
    per_s: float,
    seconds: float,
    workers: int = 2,
    stop_at_miss: bool = True,
) -> dict[str, Any]:
    """:func:`measure` for each N, smallest first, until one misses the targets (a larger N
    would too, unless ``stop_at_miss`` is off): the largest N that held them is the figure."""
    results: list[dict[str, Any]] = []
    for n in runs:
        try:
            result = await measure(server, runs=n, per_s=per_s, seconds=seconds, workers=workers)
        except Exception as exc:
            result = {"runs": n, "holds": False, "error": f"{type(exc).__name__}: {exc}"}
        results.append(result)
        print(f"   N={n}: {_line(result)}", flush=True)
        if stop_at_miss and not result["holds"]:
            break
    held = [r for r in results if r["holds"]]
    if stop_at_miss is False:  # the figure is still the largest N below the first miss
        held = held[: next((i for i, r in enumerate(results) if not r["holds"]), len(results))]
    # Judged between the N that hold: an overloaded run commits less because it falls behind.
    fsynced = [r["fsynced_commits_per_s"] for r in held if r.get("fsynced_commits_per_s")]
    return {
        "per_s": per_s,
        "seconds": seconds,
        "workers": workers,
        "api_processes": 1,
        "largest_n_holding": held[-1]["runs"] if held else 0,
        "at_largest_n_holding": {
            "cpu_ms_per_run_s": held[-1]["cpu_ms_per_run_s"]["runq_and_postgres"],
            "p99_ms": held[-1]["latency"]["p99_ms"],
            "peak_connections": held[-1]["connections"]["peak"],
        }
        if held
        else None,
        # Fsync'd commits per second at the largest N that holds over those at the smallest.
        "fsynced_growth": round(fsynced[-1] / fsynced[0], 2) if len(fsynced) > 1 else None,
        "targets": {"lost": 0, "duplicated": 0, "out_of_order": 0, "retried_attempts": 0, "p99_ms": P99_TARGET_MS},
        "sweep": results,
    }


def _line(r: dict[str, Any]) -> str:
    if "error" in r and "tokens" not in r:
        return f"error: {r['error'][:200]}"
    t, cpu, c = r["tokens"], r["cpu_ms_per_run_s"], r["commits_per_run_s"]
    return (
        f"lost/dup/ooo {t['lost']}/{t['duplicated']}/{t['out_of_order']}, retried {r['retried_attempts']},"
        f" p50/p99 {r['latency'].get('p50_ms')}/{r['latency'].get('p99_ms')} ms,"
        f" CPU ms/run-s api {cpu['api']} workers {cpu['workers']} pg {cpu['postgres']},"
        f" commits/run-s {c['all']} (fsync'd {c['fsynced']}), peak conns {r['connections']['peak']},"
        f" {'holds' if r['holds'] else 'MISSES'}"
    )


async def measure(server: BenchServer, *, runs: int, per_s: float, seconds: float, workers: int) -> dict[str, Any]:
    slots = math.ceil(runs / workers)
    async with (
        server.database("streaming") as url,
        model_server(per_s=per_s, seconds=seconds) as (model_url, model),
        connect(server.url) as observer_conn,
    ):
        database = make_url(url).database or ""
        observer = PgObserver(observer_conn, database)
        env = worker_env(url, RUNQ_OPENAI_BASE_URL=model_url)
        async with (
            connect(url) as wal_conn,
            running_api(url) as api,
            children([worker_argv(slots)] * workers, env=env) as procs,
        ):
            await wait_for_workers(url, workers, sessions=WORKER_READY, watch=procs)
            await observer.start(wal_conn=wal_conn)
            statements0 = await server.statement_stats(database)
            cpu0 = _cpu(api, procs, model)
            t0, busy0 = time.time(), machine_busy_s()
            followed, streams = await _create_and_follow(api, runs, over_s=min(1.0, seconds / 4))
            ids = [f.run_id for f in followed]
            _, unfinished = await asyncio.wait(streams, timeout=4 * seconds + 90)
            t_end, busy = time.time(), machine_busy_s() - busy0
            cpu = {k: v - cpu0[k] for k, v in _cpu(api, procs, model).items()}
            pg_cpu = await observer.stop_sampling()
            for task in unfinished:
                task.cancel()
            statements = _statements_per_run_s(statements0, await server.statement_stats(database), run_seconds=runs * seconds)
            logs = [api.child.log, *(p.log for p in procs)]
        # Every runq process has exited here: its backends have flushed their counters.
        async with connect(url) as conn:
            counted = await observer.counted(conn)
            rows = await conn.fetch("SELECT status, attempts FROM agent_runs WHERE id = ANY($1::uuid[])", ids)
            retrying = await conn.fetchval("SELECT count(*) FROM run_events WHERE type = 'run.retrying'")
    run_seconds = runs * seconds
    too_many = sum(text.count(marker) for log in logs for text in [log.read_text(errors="replace")] for marker in TOO_MANY)
    tokens = _token_check(followed, expected=round(per_s * seconds))
    latencies = [s for f in followed for s in f.latencies_s]
    statuses = Counter(r["status"] for r in rows)
    retried = sum(r["attempts"] - 1 for r in rows)
    harness = cpu["harness"] + cpu["model_server"]
    runq_ms = {"api": cpu["api"] * 1000 / run_seconds, "workers": cpu["workers"] * 1000 / run_seconds}
    pg_ms = pg_cpu["backends_s"] * 1000 / run_seconds
    result: dict[str, Any] = {
        "runs": runs,
        "slots_per_worker": slots,
        "wall_s": round(t_end - t0, 1),
        "run_seconds": run_seconds,
        "statuses": dict(statuses),
        "retried_attempts": retried,
        "retrying_events": retrying,
        "streams_unfinished": len(unfinished),
        "stream_errors": Counter(f.error for f in followed if f.error).most_common(3),
        "tokens": tokens,
        "latency": summary(latencies) if latencies else {},
        "cpu_ms_per_run_s": {
            "api": round(runq_ms["api"], 2),
            "workers": round(runq_ms["workers"], 2),
            "postgres": round(pg_ms, 2),
            "runq_and_postgres": round(runq_ms["api"] + runq_ms["workers"] + pg_ms, 2),
            "postgres_shared_processes": round(pg_cpu["shared_s"] * 1000 / run_seconds, 2),
            "harness": round(harness * 1000 / run_seconds, 2),
        },
        "machine": {
            "busy_cores": round(busy / (t_end - t0), 2),
            # What the machine spent beyond runq, its backends and the harness: other tenants.
            "others_cores": round(
                max(0.0, busy - sum(cpu.values()) - pg_cpu["backends_s"] - pg_cpu["shared_s"]) / (t_end - t0), 2
            ),
        },
        "commits_per_run_s": {
            "all": round(counted["commits"] / run_seconds, 1),
            "fsynced": None if counted["fsynced_commits"] is None else round(counted["fsynced_commits"] / run_seconds, 1),
            "wal_syncs_server_wide": round(counted["wal_syncs"] / run_seconds, 1),
        },
        "fsynced_commits_per_s": None
        if counted["fsynced_commits"] is None
        else round(counted["fsynced_commits"] / (t_end - t0), 1),
        "commits_measured_as": {
            "all": "pg_stat_database.xact_commit delta of the run's database",
            "fsynced": "COMMIT records in the window's WAL whose transaction wrote a block of that database (pg_walinspect)",
            "wal_syncs_server_wide": "WAL fsyncs (pg_stat_wal, pg_stat_io from 18) of every database; group commit merges",
        },
        "connections": {
            "peak": observer.peak_connections,
            "peak_by_application": observer.peak_by_application,
            "peak_server_client_backends": observer.peak_server_connections,
        },
        "too_many_clients_log_lines": too_many,
        # From pg_stat_statements where the server has it loaded (the embedded one does).
        "top_statements_per_run_s": statements,
    }
    if "fsynced_commits_error" in counted:
        result["fsynced_commits_error"] = counted["fsynced_commits_error"]
    result["holds"] = bool(
        statuses.get("done", 0) == runs
        and not unfinished
        and not result["stream_errors"]
        and retried == 0
        and tokens["lost"] == tokens["duplicated"] == tokens["out_of_order"] == tokens["completed_mismatch"] == 0
        and latencies
        and result["latency"]["p99_ms"] <= P99_TARGET_MS
    )
    return result


def _cpu(api: Api, workers: Sequence[Child], model: Child) -> dict[str, float]:
    return {
        "api": api.child.cpu_s(),
        "workers": sum(p.cpu_s() for p in workers),
        "model_server": model.cpu_s(),
        "harness": harness_cpu_s(),
    }


async def _create_and_follow(api: Api, runs: int, *, over_s: float) -> tuple[list[Followed], list[asyncio.Task[None]]]:
    """Each run as its user starts it: ``POST /runs``, then its subscriber at once; the users
    arrive evenly over ``over_s``."""
    followed: list[Followed] = []
    streams: list[asyncio.Task[None]] = []
    headers = {**api.auth, "Content-Type": "application/json"}
    async with connection("127.0.0.1", api.port) as conn:
        async for _ in arriving(runs, over_s=over_s):
            status, body = await conn.request("POST", "/runs", headers=headers, body=CREATE)
            if status != 201:
                raise RuntimeError(f"POST /runs answered {status}: {body[:200]!r}")
            followed.append(Followed(uuid.UUID(json.loads(body)["id"])))
            streams.append(asyncio.create_task(_follow(api, followed[-1])))
    return followed, streams


async def _follow(api: Api, into: Followed) -> None:
    """One subscriber: every frame of its run's stream until the API ends it."""
    try:
        async with connection("127.0.0.1", api.port) as conn:
            async for frame in conn.frames(f"/runs/{into.run_id}/events", headers=api.auth):
                if frame.event == "message.delta":
                    text = json.loads(frame.data)["text"]
                    into.delta_text.append(text)
                    for token in text.split(";")[:-1]:
                        index, micros = parse_token(token)
                        into.tokens.append(index)
                        into.latencies_s.append(frame.received - micros / 1e6)
                elif frame.event == "message.completed":
                    into.completed_text.append(json.loads(frame.data)["text"])
                elif frame.event in ("run.completed", "run.failed", "run.cancelled"):
                    into.terminal = frame.event
    except Exception as exc:  # a broken stream is a result, not a crash of the bench
        into.error = f"{type(exc).__name__}: {exc}"[:200]


def _statements_per_run_s(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], *, run_seconds: float
) -> list[dict[str, Any]]:
    """The statements that ran most often in the window, per streaming run-second."""
    calls = {q: (n - before.get(q, (0, 0.0))[0], ms - before.get(q, (0, 0.0))[1]) for q, (n, ms) in after.items()}
    top = sorted(calls.items(), key=lambda kv: -kv[1][0])[:8]
    return [
        {"per_run_s": round(n / run_seconds, 2), "exec_ms_per_run_s": round(ms / run_seconds, 3), "query": " ".join(q.split())[:100]}
        for q, (n, ms) in top
        if n > 0
    ]


def _token_check(followed: Sequence[Followed], *, expected: int) -> dict[str, int]:
    """Tokens lost (never received), duplicated (received again), out of order (received after
    a later one), summed over runs; and runs whose ``message.completed`` is not their deltas."""
    lost = duplicated = out_of_order = mismatch = 0
    for f in followed:
        seen: set[int] = set()
        highest = -1
        for index in f.tokens:
            if index in seen:
                duplicated += 1
            elif index < highest:
                out_of_order += 1
            seen.add(index)
            highest = max(highest, index)
        lost += len(set(range(expected)) - seen)
        if f.completed_text != ["".join(f.delta_text)]:
            mismatch += 1
    return {
        "expected": expected * len(followed),
        "received": sum(len(f.tokens) for f in followed),
        "lost": lost,
        "duplicated": duplicated,
        "out_of_order": out_of_order,
        "completed_mismatch": mismatch,
    }
