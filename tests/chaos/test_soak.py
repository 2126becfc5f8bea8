"""The soak (issue 9): thousands of demo runs through 2 API processes and 3 workers while faults
are injected at random; afterwards every invariant is checked over the recorded history and the
database, and the figures go to ``tests/artifacts/soak.json``.

Faults: SIGKILL of a worker (a new one takes its place), SIGSTOP of a worker for longer than a
lease and then SIGCONT (the zombie wakes up after others took its runs), ``pg_terminate_backend``
of workers' connections, and one restart of PostgreSQL on the same port.

``RUNQ_CHAOS_RUNS`` sets the size: 400 runs in ``make test``, 5,000 in ``make chaos``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text

from app.db.engine import create_engine
from app.db.url import asyncpg_dsn
from app.domain import Event, Run, Status
from app.queue import Queue
from tests.api_support import ROOT
from tests.chaos.soak.cluster import SoakCluster
from tests.chaos.soak.history import History
from tests.chaos.soak.workload import FAULT_KINDS, Clients, FaultInjector, run_body
from tests.invariants import Findings, check_runs

RUNS = int(os.environ.get("RUNQ_CHAOS_RUNS", "400"))
SEED = int(os.environ.get("RUNQ_SOAK_SEED", "9"))
WORKERS, APIS, CONCURRENCY = 3, 2, 8
CREATE_S = max(20.0, RUNS / 50)  # creates are paced over this long; the faults run meanwhile
IN_FLIGHT_CREATES = 16
RESTART_AT = 0.4  # PostgreSQL restarts once this share of the runs was created
DRAIN_S = 90.0
ARTIFACTS = ROOT / "tests" / "artifacts"

# A loaded two-core machine creates and runs far slower than the pace asks: generous bounds.
BUDGET_S = 240 + RUNS * 0.15
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(int(BUDGET_S + DRAIN_S + 60))]


@pytest.fixture
def cluster() -> Iterator[SoakCluster]:
    cluster = SoakCluster(workers=WORKERS, apis=APIS, concurrency=CONCURRENCY)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(ARTIFACTS / "soak-logs", ignore_errors=True)
        with contextlib.suppress(OSError):
            shutil.copytree(cluster.logs, ARTIFACTS / "soak-logs")
        cluster.remove()


async def test_soak_keeps_every_invariant(cluster: SoakCluster, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    history = History()
    headers = {"Authorization": f"Bearer {await cluster.key('soak')}"}
    deadline = time.monotonic() + BUDGET_S  # for a create or cancel to be answered at all
    async with contextlib.AsyncExitStack() as stack:
        apis = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=api.base_url, timeout=10))
            for api in cluster.apis
        ]
        clients = Clients(apis, headers, history, deadline)
        injector = FaultInjector(cluster, history, rng, gap_s=(0.8, 2.0))
        faults = asyncio.create_task(injector.run())
        try:
            await create_runs(clients, injector, rng)
        finally:
            injector.stopping.set()
            await faults
        history.record("faults_stopped")
        drained = await drain(cluster.url, within=DRAIN_S)
        history.record("drained", complete=drained)

    findings, figures = await check(cluster.url, history)
    figures["api_answers"] = dict(clients.answers)
    with capsys.disabled():  # the figures are the point of `make chaos`: always on the terminal
        report(history, findings, figures)
    assert findings.counts() == dict.fromkeys(findings.counts(), 0), findings.examples
    assert set(history.faults()) == set(FAULT_KINDS), history.faults()
    assert len(history.runs) == RUNS


async def create_runs(clients: Clients, injector: FaultInjector, rng: random.Random) -> None:
    """Every run, paced evenly over ``CREATE_S``; a few are cancelled while they run, and the
    runs that wait are resumed once they do (or left to time out)."""
    slots = asyncio.Semaphore(IN_FLIGHT_CREATES)
    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic()

    async def one(i: int, body: dict[str, Any], cancel: bool, delay_s: float) -> None:
        async with slots:
            run_id = await clients.create(i, body)
        if cancel:
            await clients.cancel_later(run_id, delay_s)
        elif body["input"].get("wait") and "wait_timeout_s" not in body["input"]:
            await clients.resume_when_waiting(run_id, {"soak": i})

    for i in range(RUNS):
        await asyncio.sleep(max(0.0, started + i * CREATE_S / RUNS - time.monotonic()))
        if i == int(RUNS * RESTART_AT):
            injector.restart_now.set()
        body, cancel = run_body(rng, i)
        tasks.add(asyncio.create_task(one(i, body, cancel, rng.uniform(0.1, 1.0))))
    await asyncio.gather(*tasks)


async def unfinished(url: str) -> int:
    conn = await asyncpg.connect(asyncpg_dsn(url), server_settings={"application_name": "runq-soak"})
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM agent_runs WHERE status IN ('pending', 'leased', 'waiting')")
        )
    finally:
        await conn.close()


async def drain(url: str, *, within: float) -> bool:
    """Wait until no run is pending, leased or waiting; False if some still are after ``within``."""
    deadline = time.monotonic() + within
    while await unfinished(url):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.25)
    return True


async def check(url: str, history: History) -> tuple[Findings, dict[str, Any]]:
    """The invariants over the history and the database, and the soak's figures."""
    engine = create_engine(url, pool_size=2, application_name="runq-soak")
    try:
        queue = Queue(engine)
        runs = await queue.list_runs(tenant_id=None, limit=RUNS * 2 + 10)
        events = {run.id: await queue.read_events(run.id, limit=100_000) for run in runs}
        effects: dict[uuid.UUID, dict[str, int]] = {}
        async with engine.connect() as conn:
            for row in await conn.execute(text("SELECT run_id, key, attempt FROM run_effects")):
                effects.setdefault(row.run_id, {})[row.key] = row.attempt
    finally:
        await engine.dispose()
    findings = check_runs(history.expectations(), runs, events, effects)
    finished = [run.finished_at for run in runs if run.finished_at is not None]
    elapsed = (max(finished) - min(run.created_at for run in runs)).total_seconds() if finished else 0.0
    cancels = [e for e in history.entries if e["op"] == "cancel_answer"]
    figures: dict[str, Any] = {
        "runs": len(runs),
        "events": sum(len(log) for log in events.values()),
        "workers": WORKERS,
        "concurrency": CONCURRENCY,
        "api_processes": APIS,
        "seed": SEED,
        "elapsed_s": round(elapsed, 1),
        "throughput_runs_per_s": round(len(finished) / elapsed, 1) if elapsed else 0.0,
        "faults": dict(history.faults()),
        "invariants": findings.counts(),
        "outcomes": dict(sorted(findings.info.items())),
        "cancels": {
            "sent": sum(1 for e in history.entries if e["op"] == "cancel_sent"),
            "acked_202": dict(history.cancels_acked_by_status()),
            "refused_409_finished": sum(1 for e in cancels if e["http_status"] == 409),
        },
        "zombies": [
            {k: e.get(k) for k in ("pid", "frozen_s", "leases_held", "taken_over", "early")}
            for e in history.entries
            if e["op"] == "zombie_resumed"
        ],
        "cancel_to_cancelled_s": cancel_latency(history, runs, events),
        "waits": {
            "resumed_202": sum(1 for e in history.entries if e["op"] == "resume_answer" and e["http_status"] == 202),
            "resumed_409_after_a_lost_answer": sum(
                1 for e in history.entries if e["op"] == "resume_answer" and e["http_status"] == 409
            ),
            "timed_out": sum(1 for run in runs if isinstance(run.output, dict) and run.output.get("timed_out")),
        },
        "api_errors_5xx": sum(1 for e in history.entries if e["op"] == "api_error"),
        "load_average_1m": round(os.getloadavg()[0], 1),  # on 2 cores: how shared the machine was
        "examples": findings.examples,
    }
    return findings, figures


def cancel_latency(history: History, runs: list[Run], events: dict[uuid.UUID, list[Event]]) -> dict[str, float]:
    """From ``run.cancel_requested`` to ``run.cancelled``, for the runs whose cancel was
    acknowledged while they were leased (a pending run is cancelled in the same statement)."""
    leased = {uuid.UUID(run_id) for run_id, run in history.runs.items() if run.get("cancel_acked") == "leased"}
    waits = []
    for run in runs:
        log = events.get(run.id, [])
        asked = next((e for e in log if e.type == "run.cancel_requested"), None)
        if run.id in leased and run.status is Status.CANCELLED and asked is not None:
            waits.append((log[-1].created_at - asked.created_at).total_seconds())
    if not waits:
        return {}
    waits.sort()
    return {"runs": len(waits), "p50": round(waits[len(waits) // 2], 3), "max": round(waits[-1], 3)}


def report(history: History, findings: Findings, figures: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "soak.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    history.dump(ARTIFACTS / "soak-history.jsonl")
    print(f"\nsoak: {figures['runs']} runs, {figures['events']} events in {figures['elapsed_s']} s "
          f"({figures['throughput_runs_per_s']} runs/s), {WORKERS} workers x {CONCURRENCY}, {APIS} API processes")
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(figures["faults"].items())))
    for name, count in findings.counts().items():
        print(f"  {name:<28} {count}")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in figures["outcomes"].items()))
    print(f"cancels: {figures['cancels']}, cancel request to cancelled: {figures['cancel_to_cancelled_s']}")
    print(f"waits: {figures['waits']}")
    zombies = figures["zombies"]
    print(f"zombies: {len(zombies)} frozen past their lease, holding {sum(z['leases_held'] or 0 for z in zombies)} leases,"
          f" {sum(z['taken_over'] or 0 for z in zombies)} taken over before they woke")
