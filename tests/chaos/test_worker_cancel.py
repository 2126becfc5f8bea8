"""A cancel request reaches a run that sits in a long tool call and kills the tool."""

from __future__ import annotations

import pytest

from app.domain import Status
from app.queue import Queue
from tests.chaos.conftest import SpawnWorker
from tests.worker_support import check_event_log, enqueue_demo, running, wait_finished, wait_until

pytestmark = pytest.mark.chaos

HEARTBEAT_S = 0.5


async def test_cancel_kills_a_running_shell_within_a_heartbeat(
    spawn_worker: SpawnWorker, queue: Queue
) -> None:
    worker = spawn_worker(concurrency=2, RUNQ_HEARTBEAT_S=str(HEARTBEAT_S))
    run = await enqueue_demo(queue, prompt="wait for it", steps=0, shell="sleep 300")
    sleepers = await wait_until(
        lambda: worker.tools(["sleep", "300"]), within=15, what="the shell to start"
    )

    await queue.request_cancel(run.id, tenant_id=None, note="user pressed stop")
    done = await wait_finished(queue, run.id, within=5)
    assert done.status is Status.CANCELLED and done.cancel_reason == "user"
    assert done.cancel_requested_at is not None and done.finished_at is not None
    assert (done.finished_at - done.cancel_requested_at).total_seconds() < HEARTBEAT_S + 0.5
    await wait_until(
        lambda: not any(running(pid) for pid in sleepers) and not worker.tools(["sleep", "300"]),
        within=1,
        what="no sleep 300 left",
    )

    events = await queue.read_events(run.id)
    check_event_log(events)
    types = [e.type for e in events]
    # The partial work stays: the prompt, the shell's call, the request, then the terminal event.
    # The request is stored when it is made; the worker's own events reach the log with its next
    # batched write, so the request may sit before or after them, never after the terminal event.
    worker_events = [t for t in types if t in ("message.completed", "tool.call")]
    assert worker_events == ["message.completed", "tool.call"], types
    assert types.count("run.cancel_requested") == 1 and types[-1] == "run.cancelled", types
    assert events[-1].data == {"reason": "user"}
