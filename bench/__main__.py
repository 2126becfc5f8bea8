"""``python -m bench [--smoke] [--only SECTION ...]``: every figure of issue 7 in one run, on one
PostgreSQL server, printed as a table and written as JSON.

The full run writes ``bench/results/latest.json``; ``--smoke`` runs every section with tiny
counts (under a minute, for CI) and ``--only`` picks sections; both write elsewhere unless
``--output`` says so, so a partial run never replaces the committed figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    cost,
    create_rate,
    frontends_ag_ui,
    frontends_ai_sdk,
    latency,
    limits,
    peers,
    pgbench_raw,
    report,
    sse,
    streaming,
    threads,
    throughput,
    wakeups,
)
from bench.procs import ROOT
from bench.server import BenchServer

LATEST = ROOT / "bench" / "results" / "latest.json"


@dataclass(frozen=True)
class Profile:
    e2e_runs: int = 20_000
    e2e_processes: tuple[int, ...] = (1, 2)  # 4 on 2 cores: no better (see docs)
    e2e_concurrency: tuple[int, ...] = (32, 64, 128)
    drain_rounds: int = 2  # per configuration, runq and PgQueuer alike: a 2 s drain is noisy
    repository_runs: int = 5_000
    peer_jobs: int = 20_000
    peer_processes: tuple[int, ...] = (1, 2, 4)
    pgqueuer_tuned_batch: int | None = 50  # beside its documented default of 10
    procrastinate_processes: tuple[int, ...] = (2,)
    pgbench_seconds: float = 10.0
    pgbench_jobs: int = 200_000
    pickup_samples: int = 500
    sse_runs: int = 100
    sse_per_run: int = 10
    sse_steps: int = 10
    sse_step_s: float = 0.5
    sse_workers: int = 2
    create_seconds: float = 10.0
    heartbeat_interval_s: float = 1.0
    heartbeat_intervals: int = 10
    hot_rounds: int = 200
    claim_pending: int = 100_000
    claim_small: int = 1_000
    claim_large: int = 1_000_000
    claim_samples: int = 300
    streaming_runs: tuple[int, ...] = (50, 100, 150, 200)  # the sweep stops at the first miss
    streaming_per_s: float = 20.0
    streaming_seconds: float = 20.0
    streaming_stop_at_miss: bool = True  # off when the N are given on the command line
    wakeup_workers: tuple[int, ...] = (8, 32, 128)  # idle worker processes of one slot each
    wakeup_samples: int = 100
    wakeup_burst: int = 1_000
    wakeup_modes: tuple[str, ...] = ("targeted", "broadcast")
    threads_pending: int = 50_000
    threads_busy: int = 200
    threads_samples: int = 300
    frameworks_rounds: int = 10  # runs of each shape, bare and through runq
    frameworks_tools: int = 5  # tool calls in the shapes that call tools
    frameworks_concurrency: int = 50  # runs at once, beside one at a time
    frameworks_replay_steps: int = 50  # model requests of the run replayed after a crash at its last tool
    langgraph_samples: int = 500  # checkpoint puts and gets per saver
    langgraph_graph_runs: int = 100  # 10-node graph runs per saver
    langgraph_steps: int = 1_000  # a looping graph's steps on one thread, then its rows
    limits_seconds: float = 8.0  # per create-rate run and per quiet-tenant case
    ai_sdk_streams: int = 20  # concurrent chat answers per round, native SSE and AI SDK in turn
    ai_sdk_steps: int = 20  # demo steps per run (two events each)
    ai_sdk_rounds: int = 5
    ai_sdk_resume_events: int = 5_000  # stored events of the answer a reloaded page resumes
    ag_ui_runs: int = 50  # finished runs replayed per round, native SSE and AG-UI in turn
    ag_ui_steps: int = 20  # tool steps per run (a streamed prompt before them)
    ag_ui_rounds: int = 3
    lg_server_runs: int = 100  # streamed runs one at a time, per server (runq's /langgraph, langgraph dev)
    lg_server_concurrency: int = 50  # runs at once, each server allowed as many
    lg_server_rounds: int = 4  # of lg_server_concurrency runs at once
    lg_server_reconnects: int = 20  # cut streams joined again, of each kind
    lg_server_tokens: int = 50  # the fake model's answer
    lg_server_token_ms: float = 5.0  # between its tokens
    lg_server_cut_after: int = 10  # tokens read before a reconnect's cut


FULL = Profile()
SMOKE = Profile(
    e2e_runs=200,
    e2e_processes=(1,),
    e2e_concurrency=(32,),
    drain_rounds=1,
    repository_runs=100,
    peer_jobs=200,
    peer_processes=(1,),
    pgqueuer_tuned_batch=None,
    procrastinate_processes=(1,),
    pgbench_seconds=1.0,
    pgbench_jobs=20_000,
    pickup_samples=20,
    sse_runs=5,
    sse_per_run=4,
    sse_steps=2,
    sse_step_s=0.1,
    sse_workers=1,
    create_seconds=1.0,
    limits_seconds=1.0,
    heartbeat_interval_s=0.2,
    heartbeat_intervals=5,
    hot_rounds=10,
    claim_pending=2_000,
    claim_small=100,
    claim_large=5_000,
    claim_samples=20,
    streaming_runs=(4,),
    streaming_seconds=2.0,
    wakeup_workers=(4,),
    wakeup_samples=5,
    wakeup_burst=40,
    wakeup_modes=("targeted",),
    threads_pending=1_000,
    threads_busy=10,
    threads_samples=20,
    frameworks_rounds=1,
    frameworks_tools=2,
    frameworks_concurrency=4,
    frameworks_replay_steps=6,
    langgraph_samples=10,
    langgraph_graph_runs=3,
    langgraph_steps=30,
    ai_sdk_streams=2,
    ai_sdk_steps=2,
    ai_sdk_rounds=1,
    ai_sdk_resume_events=200,
    ag_ui_runs=3,
    ag_ui_steps=2,
    ag_ui_rounds=1,
    lg_server_runs=3,
    lg_server_concurrency=4,
    lg_server_rounds=1,
    lg_server_reconnects=1,
)

Section = Callable[[BenchServer, Profile, dict[str, Any]], Awaitable[None]]


async def _pgbench(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out.setdefault("throughput", {})["raw_sql"] = await pgbench_raw.raw_claim_ack(
        server, seconds=p.pgbench_seconds, jobs=p.pgbench_jobs
    )


async def _e2e(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out.setdefault("throughput", {})["runq_e2e"] = await throughput.end_to_end(
        server, runs=p.e2e_runs, processes=p.e2e_processes, concurrency=p.e2e_concurrency, rounds=p.drain_rounds
    )


async def _repository(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out.setdefault("throughput", {})["repository"] = await throughput.repository_layer(
        server, runs=p.repository_runs
    )


async def _pgqueuer(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out.setdefault("throughput", {})["pgqueuer"] = await peers.pgqueuer_drain(
        server, jobs=p.peer_jobs, processes=p.peer_processes, rounds=p.drain_rounds
    )
    if p.pgqueuer_tuned_batch:
        out["throughput"]["pgqueuer_tuned"] = await peers.pgqueuer_drain(
            server,
            jobs=p.peer_jobs,
            processes=p.peer_processes,
            batch_sizes=(p.pgqueuer_tuned_batch,),
            rounds=p.drain_rounds,
        )


async def _procrastinate(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out.setdefault("throughput", {})["procrastinate"] = await peers.procrastinate_drain(
        server, jobs=p.peer_jobs, processes=p.procrastinate_processes
    )


async def _pickup(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    pickup = out.setdefault("pickup", {})
    pickup["runq"] = await latency.pickup(server, samples=p.pickup_samples)
    pickup["pgqueuer"] = await peers.pgqueuer_pickup(server, samples=p.pickup_samples)


async def _sse(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    shape = {"runs": p.sse_runs, "per_run": p.sse_per_run, "steps": p.sse_steps, "step_s": p.sse_step_s}
    out["sse"] = await sse.fan_out(server, workers=p.sse_workers, **shape)
    out["sse"]["lockstep"] = await sse.fan_out(server, workers=p.sse_workers, lockstep=True, **shape)


async def _create(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out["create"] = await create_rate.create_rate(server, seconds=p.create_seconds)


async def _cost(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    section = out.setdefault("cost", {})
    timings = section.setdefault("timings_s", {})
    statement_stats = server.statement_stats_loaded
    parts: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "heartbeat": lambda: cost.heartbeat_statements(
            server,
            interval_s=p.heartbeat_interval_s,
            intervals=p.heartbeat_intervals,
            statement_stats=statement_stats,
        ),
        "hot": lambda: cost.hot_ratio(server, rounds=p.hot_rounds),
        "claim_latency": lambda: cost.claim_latency(
            server, pending=p.claim_pending, small=p.claim_small, large=p.claim_large, samples=p.claim_samples
        ),
    }
    for name, part in parts.items():
        started = time.monotonic()
        section[name] = await part()
        timings[name] = round(time.monotonic() - started, 1)


async def _streaming(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out["streaming"] = await streaming.sweep(
        server,
        runs=p.streaming_runs,
        per_s=p.streaming_per_s,
        seconds=p.streaming_seconds,
        stop_at_miss=p.streaming_stop_at_miss,
    )
    first = out["streaming"]["sweep"][0]
    if "error" in first:  # a larger N may fail for runq's reasons; the smallest failing is the bench's
        raise RuntimeError(f"streaming at N={first['runs']}: {first['error']}")


async def _wakeups(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out["wakeups"] = await wakeups.fleet(
        server, workers=p.wakeup_workers, samples=p.wakeup_samples, burst=p.wakeup_burst, modes=p.wakeup_modes
    )


async def _threads(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    section = out.setdefault("threads", {})
    for name, busy in (("claim_latency_no_busy", 0), ("claim_latency", p.threads_busy)):
        section[name] = await threads.claim_latency(
            server, pending=p.threads_pending, busy=busy, samples=p.threads_samples
        )


async def _frameworks_pydantic_ai(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    from bench import frameworks_pydantic_ai  # the pydantic-ai extra, loaded by this section only

    out.setdefault("frameworks", {})["pydantic_ai"] = await frameworks_pydantic_ai.overhead_and_replay(
        server, rounds=p.frameworks_rounds, tools=p.frameworks_tools, concurrency=p.frameworks_concurrency,
        replay_steps=p.frameworks_replay_steps,
    )


async def _frameworks_openai_agents(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    # the openai-agents extra, loaded by this section only
    from bench import frameworks_openai_agents

    out.setdefault("frameworks", {})["openai_agents"] = await frameworks_openai_agents.overhead_and_replay(
        server, rounds=p.frameworks_rounds, tools=p.frameworks_tools, concurrency=p.frameworks_concurrency,
        replay_steps=p.frameworks_replay_steps,
    )


async def _frameworks_langgraph(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    from bench import frameworks_langgraph  # the langgraph extra: the other sections run without it

    out["frameworks_langgraph"] = await frameworks_langgraph.compare(
        server, samples=p.langgraph_samples, graph_runs=p.langgraph_graph_runs, steps=p.langgraph_steps
    )


async def _limits(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    section = out.setdefault("limits", {})
    section["throughput"] = await limits.throughput(server, seconds=p.limits_seconds)
    section["neighbour"] = await limits.neighbour(server, seconds=p.limits_seconds)


async def _frontends_ai_sdk(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out["frontends_ai_sdk"] = await frontends_ai_sdk.compare(
        server, streams=p.ai_sdk_streams, steps=p.ai_sdk_steps, rounds=p.ai_sdk_rounds
    )
    out["frontends_ai_sdk"]["resume"] = await frontends_ai_sdk.resume(
        server, events=p.ai_sdk_resume_events, rounds=3
    )


async def _frontends_ag_ui(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    out["frontends_ag_ui"] = await frontends_ag_ui.compare(
        server, runs=p.ag_ui_runs, steps=p.ag_ui_steps, rounds=p.ag_ui_rounds
    )


async def _langgraph_server(server: BenchServer, p: Profile, out: dict[str, Any]) -> None:
    from bench import langgraph_server  # langgraph-sdk (the dev extra) and the reference's venv

    out["langgraph_server"] = await langgraph_server.compare(
        server,
        runs=p.lg_server_runs,
        concurrency=p.lg_server_concurrency,
        rounds=p.lg_server_rounds,
        reconnects=p.lg_server_reconnects,
        tokens=p.lg_server_tokens,
        token_ms=p.lg_server_token_ms,
        cut_after=p.lg_server_cut_after,
    )


SECTIONS: dict[str, Section] = {
    "pgbench": _pgbench,
    "e2e": _e2e,
    "repository": _repository,
    "pgqueuer": _pgqueuer,
    "procrastinate": _procrastinate,
    "pickup": _pickup,
    "sse": _sse,
    "create": _create,
    "cost": _cost,
    "streaming": _streaming,
    "wakeups": _wakeups,
    "threads": _threads,
    "frameworks-pydantic-ai": _frameworks_pydantic_ai,
    "frameworks-openai-agents": _frameworks_openai_agents,
    "frameworks-langgraph": _frameworks_langgraph,
    "limits": _limits,
    "frontends-ai-sdk": _frontends_ai_sdk,
    "frontends-ag-ui": _frontends_ag_ui,
    "langgraph-server": _langgraph_server,
}


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "?")
    memory = next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(int(memory) / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git_commit": commit.stdout.strip(),
        "load_average_at_start": os.getloadavg(),
    }


async def run(profile: Profile, names: list[str], server: BenchServer) -> dict[str, Any]:
    results: dict[str, Any] = {"meta": {"started_at": datetime.now(UTC).isoformat(timespec="seconds")}}
    results["meta"]["machine"] = machine()
    await server.load_statement_stats()
    results["meta"]["server"] = await server.describe()
    results["meta"]["profile"] = asdict(profile)
    print(f"server: {results['meta']['server']['version']} ({server.source})", flush=True)
    m = results["meta"]["machine"]
    print(f"machine: {m['nproc']} cores, {m['cpu_model']}, {m['memory_gb']} GB, load {m['load_average_at_start']}")
    errors = results.setdefault("errors", {})
    started = time.monotonic()
    for name in names:
        section_started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            await SECTIONS[name](server, profile, results)
        except Exception as exc:
            traceback.print_exc()
            errors[name] = f"{type(exc).__name__}: {exc}"
        results["meta"].setdefault("section_s", {})[name] = round(time.monotonic() - section_started, 1)
    await server.close()
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    results["meta"]["load_average_at_end"] = os.getloadavg()
    results["ratios"] = report.ratios(results)
    results["targets"] = report.targets(results)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny counts, every section, < 1 minute")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), metavar="SECTION", help=", ".join(SECTIONS))
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    parser.add_argument(
        "--streaming-runs", type=int, nargs="+", metavar="N", help="the streaming sweep's N, each run even after a miss (default 50 100 150 200, up to the first miss)"
    )
    parser.add_argument(
        "--wakeup-workers", type=int, nargs="+", metavar="N", help="the wakeups section's idle workers (default 8 32 128)"
    )
    parser.add_argument(
        "--wakeup-modes", nargs="+", choices=("targeted", "broadcast"), help="the wakeups section's modes (default both)"
    )
    parser.add_argument(
        "--e2e-runs", type=int, metavar="N", help="the end-to-end drain's backlog (e.g. to compare OTEL_TRACES_EXPORTER=console against no tracing)"
    )
    args = parser.parse_args()
    names = args.only or list(SECTIONS)
    names = [n for n in SECTIONS if n in names]
    output = args.output or (
        LATEST if not (args.smoke or args.only) else Path(tempfile.gettempdir()) / "runq-bench.json"
    )
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,000 SSE sockets, here and in the API
    profile = SMOKE if args.smoke else FULL
    if args.e2e_runs:
        profile = replace(profile, e2e_runs=args.e2e_runs)
    if args.streaming_runs:
        profile = replace(profile, streaming_runs=tuple(args.streaming_runs), streaming_stop_at_miss=False)
    if args.wakeup_workers:
        profile = replace(profile, wakeup_workers=tuple(args.wakeup_workers))
    if args.wakeup_modes:
        profile = replace(profile, wakeup_modes=tuple(args.wakeup_modes))
    with BenchServer.open() as server:
        results = asyncio.run(run(profile, names, server))
    results["meta"]["smoke"] = args.smoke
    results["meta"]["sections"] = names
    print()
    print(report.table(results))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nresults: {output} ({results['meta']['duration_s']} s)")
    if results["errors"]:
        print(f"sections that failed: {', '.join(results['errors'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
