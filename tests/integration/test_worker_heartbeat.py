"""The heartbeat thread on its own: renewals, cancel requests and lost leases, without LISTEN."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from functools import partial

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Finish, WorkerInfo
from app.queue import Queue
from app.worker.lease import Heartbeat
from tests.worker_support import enqueue_demo, wait_until

INTERVAL_S = 0.2


class Holder:
    """Records the heartbeat's callbacks, which arrive on the heartbeat's thread."""

    def __init__(self, lease_id: uuid.UUID) -> None:
        self.lease_id = lease_id
        self.lost = threading.Event()
        self.cancelled = threading.Event()
        self.threads: set[str] = set()

    def lease_lost(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.lost.set()

    def cancel_requested(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.cancelled.set()


@pytest.fixture
def heartbeat(database_url: str) -> Iterator[Heartbeat]:
    with Heartbeat(database_url=database_url, worker=WorkerInfo.start(slots=1), lease_s=2.0, interval_s=INTERVAL_S) as beat:
        yield beat


async def heartbeat_at(engine: AsyncEngine, run_id: uuid.UUID) -> datetime:
    async with engine.connect() as conn:
        query = text("SELECT heartbeat_at FROM agent_runs WHERE id = :id")
        return (await conn.execute(query, {"id": run_id})).scalar_one()


async def test_renews_reports_cancel_then_loss(
    heartbeat: Heartbeat, queue: Queue, engine: AsyncEngine
) -> None:
    run = await enqueue_demo(queue)
    (claim,) = await queue.claim_batch(worker_id="w:1:a", limit=1)
    holder = Holder(claim.lease_id)
    heartbeat.hold(run.id, holder)

    first = await heartbeat_at(engine, run.id)
    await wait_until(
        lambda: _later(engine, run.id, first), within=INTERVAL_S * 10, what="a renewal"
    )

    await queue.request_cancel(run.id, tenant_id=None)
    await wait_until(holder.cancelled.is_set, within=INTERVAL_S * 10, what="the cancel")
    assert not holder.lost.is_set()

    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_runs SET lease_id = gen_random_uuid() WHERE id = :id"),
            {"id": run.id},
        )
    await wait_until(holder.lost.is_set, within=INTERVAL_S * 10, what="the loss")
    assert holder.threads == {"runq-heartbeat"}


async def test_dropped_runs_are_no_longer_renewed(
    heartbeat: Heartbeat, queue: Queue, engine: AsyncEngine
) -> None:
    dropped, witness = await enqueue_demo(queue), await enqueue_demo(queue)
    claims = {c.run.id: c for c in await queue.claim_batch(worker_id="w:1:a", limit=2)}
    holders = {run_id: Holder(c.lease_id) for run_id, c in claims.items()}
    for run_id, holder in holders.items():
        heartbeat.hold(run_id, holder)
    heartbeat.drop(dropped.id, Holder(claims[dropped.id].lease_id))  # not its holder: ignored
    first = await heartbeat_at(engine, dropped.id)
    await wait_until(lambda: _later(engine, dropped.id, first), within=2, what="a renewal")

    heartbeat.drop(dropped.id, holders[dropped.id])
    await queue.finish(run_id=dropped.id, lease_id=claims[dropped.id].lease_id, finish=Finish.done(None))
    # Two renewals of the witness: the heartbeat has beaten since the drop. Had it renewed
    # the finished run, it would have reported that lease lost.
    for _ in range(2):
        seen = await heartbeat_at(engine, witness.id)
        await wait_until(partial(_later, engine, witness.id, seen), within=2, what="a beat")
    assert not holders[dropped.id].lost.is_set()


async def _later(engine: AsyncEngine, run_id: uuid.UUID, before: datetime) -> bool:
    return await heartbeat_at(engine, run_id) > before
