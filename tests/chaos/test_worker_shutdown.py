"""Graceful shutdown: SIGTERM lets short runs finish and hands long ones to another worker."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from app.domain import Status
from app.queue import Queue
from tests.chaos.conftest import SpawnWorker
from tests.worker_support import check_event_log, enqueue_demo, wait_finished, wait_until

pytestmark = pytest.mark.chaos

LEASE_S = 30.0  # long: a handoff that waited for the lease would fail the test


async def leased_by(queue: Queue, run_id: uuid.UUID, worker_pid: int) -> bool:
    run = await queue.get_run(run_id, tenant_id=None)
    return run.status is Status.LEASED and f":{worker_pid}:" in (run.locked_by or "")


async def test_sigterm_releases_a_long_run_to_another_worker(
    spawn_worker: SpawnWorker, queue: Queue
) -> None:
    grace_s = 0.5
    env = {
        "RUNQ_LEASE_S": str(LEASE_S),
        "RUNQ_HEARTBEAT_S": "1",
        "RUNQ_SHUTDOWN_GRACE_S": str(grace_s),
        "RUNQ_LOG_LEVEL": "debug",  # the second worker's "run started" line shows who finished it
    }
    first = spawn_worker(concurrency=1, **env)
    # long enough to be running still once the second worker is up (its start takes seconds on
    # a loaded machine), short enough to finish well within the lease after the handoff
    run = await enqueue_demo(queue, prompt="hand me over", steps=6, step_s=1.0)
    await wait_until(lambda: leased_by(queue, run.id, first.pid), within=10, what="the first claim")
    second = spawn_worker(concurrency=1, **env)

    sent = time.monotonic()
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(timeout=grace_s + 5) == 0
    assert time.monotonic() - sent < grace_s + 3
    assert first.stdout() == ""

    done = await wait_finished(queue, run.id, within=15)
    assert time.monotonic() - sent < LEASE_S / 2
    assert done.status is Status.DONE and done.attempts == 2
    events = await queue.read_events(run.id)
    check_event_log(events)
    retry = next(e for e in events if e.type == "run.retrying")
    assert retry.attempt == 1 and retry.data["error_code"] == "worker_shutdown"
    assert "run started" in second.log()


async def test_sigterm_lets_a_short_run_finish_within_the_grace_period(
    spawn_worker: SpawnWorker, queue: Queue
) -> None:
    worker = spawn_worker(concurrency=2, RUNQ_SHUTDOWN_GRACE_S="10")
    run = await enqueue_demo(queue, steps=2, step_s=0.5)
    await wait_until(lambda: leased_by(queue, run.id, worker.pid), within=10, what="the claim")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0
    done = await queue.get_run(run.id, tenant_id=None)
    assert done.status is Status.DONE and done.attempts == 1
