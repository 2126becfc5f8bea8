"""Leases under pressure: long tools, a blocked event loop, and a lease taken by another claim."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Claim, Finish, Run, Status
from app.errors import LeaseLost
from app.queue import NewRun, Queue
from tests.chaos.conftest import SpawnWorker
from tests.worker_support import check_event_log, enqueue_demo, running, wait_finished, wait_until

pytestmark = pytest.mark.chaos

LEASE_S = 1.0


async def reap_until_finished(queue: Queue, run_id: uuid.UUID, *, within: float) -> Run:
    """Wait for the run to finish while reaping as often as possible: an expired lease would
    be handed back at once, so a run finishing on attempt 1 proves the lease never lapsed."""

    async def probe() -> Run | None:
        await queue.reap_expired()
        run = await queue.get_run(run_id, tenant_id=None)
        return run if run.is_terminal else None

    return await wait_until(probe, within=within, what="the run to finish")


async def test_lease_survives_a_shell_step_of_three_leases(
    spawn_worker: SpawnWorker, queue: Queue
) -> None:
    spawn_worker(concurrency=1, RUNQ_LEASE_S=str(LEASE_S), RUNQ_HEARTBEAT_S="0.25")
    run = await enqueue_demo(queue, steps=0, shell=f"sleep {3 * LEASE_S}")
    done = await reap_until_finished(queue, run.id, within=20)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert done.status is Status.DONE and done.attempts == 1
    assert [e.type for e in events].count("run.started") == 1


async def test_lease_survives_an_agent_blocking_the_event_loop(
    spawn_worker: SpawnWorker, queue: Queue
) -> None:
    spawn_worker(concurrency=1, RUNQ_LEASE_S=str(LEASE_S), RUNQ_HEARTBEAT_S="0.25")
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="blocker", input={"block_s": 3 * LEASE_S}))
    done = await reap_until_finished(queue, run.id, within=20)
    check_event_log(await queue.read_events(run.id))
    assert done.status is Status.DONE and done.attempts == 1
    assert done.output == {"blocked_s": 3 * LEASE_S}


async def test_lost_lease_stops_the_agent_and_kills_its_shell(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine
) -> None:
    worker = spawn_worker(concurrency=1)
    run = await enqueue_demo(queue, prompt="doomed", steps=0, shell="sleep 300")
    sleepers = await wait_until(
        lambda: worker.tools(["sleep", "300"]), within=15, what="the shell to start"
    )
    async with engine.connect() as conn:
        old_lease = (
            await conn.execute(
                text("SELECT lease_id FROM agent_runs WHERE id = :id"), {"id": run.id}
            )
        ).scalar_one()

    # Another claim takes the run: its lease expires in SQL, the reaper hands it back, and a
    # second worker ("thief") claims attempt 2. The heartbeat may renew in between: retry.
    async def steal() -> list[Claim]:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE agent_runs SET locked_until = now() - interval '1 second' WHERE id = :id"
                ),
                {"id": run.id},
            )
        await queue.reap_expired()
        return await queue.claim_batch(worker_id="thief:1:x", limit=1)

    (stolen,) = await wait_until(steal, within=10, what="the thief's claim")
    stolen_at = time.monotonic()
    # attempts may be 3: on a loaded machine the old worker can notice the lost lease, free its
    # slot and claim the run again between two tries of the steal; the thief's claim is later.
    assert stolen.run.id == run.id and stolen.run.attempts >= 2

    # Within a heartbeat the old worker kills the shell and stops the agent.
    await wait_until(
        lambda: not any(running(pid, ["sleep", "300"]) for pid in sleepers),
        within=5,
        what="the shell to be killed",
    )
    await wait_until(lambda: "lease lost" in worker.log(), within=5, what="the log line")
    assert time.monotonic() - stolen_at < 0.5 + 2.0

    # Its writes are refused, and nothing of attempt 1 came after attempt 2 started.
    try:
        await queue.append_events(run_id=run.id, lease_id=old_lease, events=[("tool.result", {})])
        raise AssertionError("a write with the lost lease was accepted")
    except LeaseLost:
        pass
    await queue.finish(run_id=run.id, lease_id=stolen.lease_id, finish=Finish.done({"by": "thief"}))
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert not [e for e in events if e.attempt == 1 and e.type == "tool.result"]

    # The agent task is really gone: the worker's only slot takes the next run.
    follow_up = await enqueue_demo(queue, steps=0)
    assert (await wait_finished(queue, follow_up.id)).status is Status.DONE
