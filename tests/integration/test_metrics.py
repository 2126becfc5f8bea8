"""Prometheus metrics with real values: the API's /metrics and a worker's metrics port.

The API and an in-process worker share this process's registry, so one scrape of the API
shows both sides' counters; counters are compared before and after, since other tests in the
process count too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.queue import QUEUE_DEPTH, NewRun, Queue
from app.settings import Settings
from app.worker.reaper import reap_once
from tests.api_support import (
    ROOT,
    SECRET,
    InProcessServer,
    create_run,
    free_port,
    new_key,
    wait_for,
)
from tests.worker_support import FAST, enqueue_demo, in_process_worker, wait_finished

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(exposition: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2), sse_ping_s=0.2)
    async with InProcessServer(app) as server, httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        yield client


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200
    return parse(response.text)


async def scrape_when(client: httpx.AsyncClient, ready: Callable[[Samples], bool]) -> Samples | None:
    """A scrape that satisfies ``ready``; the queue gauges refresh at most once a second."""
    samples = await scrape(client)
    return samples if ready(samples) else None


async def test_api_metrics_after_real_runs(
    api: httpx.AsyncClient, database_url: str, engine: AsyncEngine, queue: Queue
) -> None:
    key = await new_key(engine, "acme")
    before = await scrape(api)
    async with in_process_worker(database_url, concurrency=4):
        long = await create_run(api, key, input={"prompt": "hi", "steps": 6, "step_s": 0.3})
        flaky = await create_run(api, key, input={"steps": 0, "fail_attempts": 1})
        fatal = await create_run(api, key, input={"steps": 0, "fatal": True})
        delayed = await create_run(api, key, delay_s=60)
        assert (await api.post(f"/runs/{delayed['id']}/cancel", headers=key)).status_code == 202

        async with api.stream("GET", f"/runs/{long['id']}/events", headers=key) as stream:
            await wait_for(lambda: run_is(queue, long["id"], "leased"))
            while_open = await wait_for(
                lambda: scrape_when(api, lambda s: value(s, "runq_queue_depth", status="leased") >= 1)
            )
            assert value(while_open, "runq_sse_subscribers") >= 1

            # Take the lease away from under the worker: the reaper rescues the run, the
            # worker loses its lease (not a failure), and a new attempt finishes the run.
            rescued = value(before, "runq_reaper_rescued_total", outcome="pending")
            await wait_for(lambda: steal_lease(engine, queue, long["id"], rescued))
            await stream.aread()  # the stream ends with the run
        for run in (long, flaky, fatal):
            await wait_finished(queue, uuid.UUID(run["id"]))

    after = await wait_for(
        lambda: scrape_when(api, lambda s: value(s, "runq_queue_depth", status="leased") == 0)
    )

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("runq_runs_created_total", agent="demo") == 4
    assert delta("runq_runs_claimed_total") >= 5  # long twice, flaky twice, fatal
    assert delta("runq_runs_finished_total", status="done") == 2
    assert delta("runq_runs_finished_total", status="dead") == 1
    assert delta("runq_runs_finished_total", status="cancelled") == 1
    assert delta("runq_runs_cancelled_total", reason="user") == 1
    assert delta("runq_runs_retried_total") == 1  # flaky only: the lease loss is no failure
    assert delta("runq_leases_lost_total") == 1
    assert delta("runq_reaper_rescued_total", outcome="pending") == 1
    assert delta("runq_events_appended_total") > 10
    for histogram in ("runq_claim_seconds", "runq_pickup_seconds", "runq_heartbeat_seconds"):
        assert delta(f"{histogram}_count") >= 1, histogram
        assert delta(f"{histogram}_sum") > 0, histogram
    assert value(after, "runq_sse_subscribers") == 0
    assert value(after, "runq_queue_depth", status="pending") == 0
    assert value(after, "runq_oldest_pending_age_seconds") == 0
    assert value(after, "runq_database_up") == 1


async def run_is(queue: Queue, run_id: str, status: str) -> bool:
    return (await queue.get_run(uuid.UUID(run_id), tenant_id=None)).status.value == status


async def steal_lease(engine: AsyncEngine, queue: Queue, run_id: str, rescued_before: float) -> bool:
    """Expire the lease and reap; repeated until a reaper pass got in before a heartbeat."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_runs SET locked_until = now() - interval '1 second' WHERE id = :id AND attempts = 1"),
            {"id": run_id},
        )
    await reap_once(queue, retention_s=0)
    now = REGISTRY.get_sample_value("runq_reaper_rescued_total", {"outcome": "pending"}) or 0.0
    return now > rescued_before


async def test_queue_gauges_never_scan_history(queue: Queue, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, finished_at)"
                " SELECT 'acme', 'demo', 3, 'done', now() FROM generate_series(1, 50000)"
            )
        )
        await conn.execute(text("ANALYZE agent_runs"))
        plan = "\n".join(r[0] for r in await conn.execute(text(f"EXPLAIN {QUEUE_DEPTH.text}")))
    assert "Seq Scan" not in plan, plan
    assert "ix_agent_runs_claim" in plan and "ix_agent_runs_leased" in plan, plan


@pytest.fixture
def worker_with_metrics(database_url: str) -> Iterator[int]:
    """A real worker process serving its metrics on a port of its own."""
    port = free_port()
    env = os.environ | {f"RUNQ_{k.upper()}": str(v) for k, v in FAST.items()}
    env |= {"RUNQ_DATABASE_URL": database_url, "RUNQ_WORKER_METRICS_PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.worker", "--concurrency", "2"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_worker_serves_its_metrics_on_its_port(queue: Queue, worker_with_metrics: int) -> None:
    run = await enqueue_demo(queue, steps=1, step_s=0.01)
    assert (await wait_finished(queue, run.id, within=30)).status.value == "done"

    async def worker_samples() -> Samples | None:
        try:
            async with httpx.AsyncClient() as client:
                response = await client.get(f"http://127.0.0.1:{worker_with_metrics}/metrics")
        except httpx.TransportError:
            return None
        samples = parse(response.text)
        return samples if value(samples, "runq_runs_finished_total", status="done") >= 1 else None

    samples = await wait_for(worker_samples, within=10)
    assert value(samples, "runq_runs_claimed_total") >= 1
    assert value(samples, "runq_claim_seconds_count") >= 1
    assert value(samples, "runq_events_appended_total") >= 1
    # The queue gauges are the API's: a worker exports none rather than a made-up zero.
    assert not any(name.startswith(("runq_queue_depth", "runq_database_up")) for name, _ in samples)


async def test_reaper_counts_the_runs_it_ends(queue: Queue, engine: AsyncEngine) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = {
        "dead": sample("runq_runs_finished_total", status="dead"),
        "cancelled": sample("runq_runs_finished_total", status="cancelled"),
        "abandoned": sample("runq_runs_cancelled_total", reason="abandoned"),
        "rescued_dead": sample("runq_reaper_rescued_total", outcome="dead"),
    }
    last_try = await enqueue_demo(queue, max_attempts=1)
    await queue.claim_batch(worker_id="gone:1:x", limit=1)
    interactive, _ = await queue.enqueue(NewRun(
        tenant_id="t1", agent="demo", input={}, on_disconnect="cancel", disconnect_grace_s=0, delay_s=60)
    )
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_runs SET locked_until = now() - interval '1 second' WHERE id = :id"),
            {"id": last_try.id},
        )
    await reap_once(queue, retention_s=0)

    assert (await queue.get_run(last_try.id, tenant_id=None)).error_code == "lease_expired"
    assert (await queue.get_run(interactive.id, tenant_id=None)).cancel_reason == "abandoned"
    assert sample("runq_runs_finished_total", status="dead") - before["dead"] == 1
    assert sample("runq_reaper_rescued_total", outcome="dead") - before["rescued_dead"] == 1
    assert sample("runq_runs_finished_total", status="cancelled") - before["cancelled"] == 1
    assert sample("runq_runs_cancelled_total", reason="abandoned") - before["abandoned"] == 1


async def test_runs_waiting_for_their_threads_turn_are_a_gauge(
    api: httpx.AsyncClient, engine: AsyncEngine, queue: Queue
) -> None:
    key = await new_key(engine, "acme")
    thread = (await api.post("/threads", headers=key)).json()["id"]
    for _ in range(3):
        assert (await api.post(f"/threads/{thread}/runs", json={"agent": "demo"}, headers=key)).status_code == 201
    samples = await wait_for(
        lambda: scrape_when(api, lambda s: value(s, "runq_thread_runs_waiting_for_turn") == 2)
    )
    assert value(samples, "runq_queue_depth", status="pending") == 3
