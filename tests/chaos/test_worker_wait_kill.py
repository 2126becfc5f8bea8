"""A worker SIGKILLed right after it wrote a wait (docs/waits.md): the wait is stored whole with
its checkpoint, so the run stays waiting (no lease to expire, nothing for the reaper), and the
resume runs it on from there with nothing lost or repeated."""

from __future__ import annotations

import uuid

import pytest

from app.domain import Status
from app.queue import Queue
from tests.chaos.conftest import SpawnWorker
from tests.worker_support import check_event_log, enqueue_demo, wait_finished, wait_until

pytestmark = pytest.mark.chaos


async def test_sigkill_right_after_the_wait(spawn_worker: SpawnWorker, queue: Queue) -> None:
    worker = spawn_worker(concurrency=2)
    run = await enqueue_demo(queue, prompt="go?", steps=2, step_s=0.01, wait="approval", max_attempts=1)

    async def is_waiting() -> bool:
        return (await queue.get_run(run.id, tenant_id=None)).status is Status.WAITING

    await wait_until(is_waiting, within=20, what="the run to wait")
    worker.sigkill()
    held = await queue.get_run(run.id, tenant_id=None)
    logged = await queue.read_events(run.id)

    # Another worker reaps and claims for longer than a lease: a finished run proves its passes ran.
    spawn_worker(concurrency=2)
    for _ in range(3):
        other = await enqueue_demo(queue, steps=1, step_s=0.5)
        assert (await wait_finished(queue, other.id, within=20)).status is Status.DONE
    still = await queue.get_run(run.id, tenant_id=None)
    assert still.status is Status.WAITING and still.waitpoint == held.waitpoint
    assert await queue.read_events(run.id) == logged

    assert held.waitpoint is not None
    await queue.resume(run.id, tenant_id=run.tenant_id, value="yes", waitpoint_id=uuid.UUID(held.waitpoint["waitpoint_id"]))
    done = await wait_finished(queue, run.id, within=20)
    assert done.status is Status.DONE
    assert done.output == {"text": "go?", "steps": 2, "resumed_with": "yes"}
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert [e.type for e in events].count("tool.result") == 2  # the steps before the wait ran once
    assert [e.type for e in events].count("message.completed") == 1
