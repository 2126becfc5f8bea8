"""A worker that re-claims its own run after the lease expired keeps only the newer attempt."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Run, Status
from app.queue import Queue
from tests.worker_support import (
    check_event_log,
    descendants,
    enqueue_demo,
    in_process_worker,
    running,
    wait_finished,
    wait_until,
)

SLEEP = ["sleep", "300"]


def sleepers() -> list[int]:
    return [pid for pid in descendants(os.getpid()) if running(pid, SLEEP)]


async def test_reclaim_by_the_same_worker_stops_the_older_attempt(
    database_url: str, engine: AsyncEngine, queue: Queue
) -> None:
    async with in_process_worker(database_url, concurrency=2, reaper_s=60):
        run = await enqueue_demo(queue, steps=0, shell=" ".join(SLEEP))
        (first_shell,) = await wait_until(sleepers, within=10, what="the first shell")

        async def expire_and_reap() -> list[Run]:
            # The heartbeat may renew between the two statements: then try again.
            async with engine.begin() as conn:
                await conn.execute(
                    text(
                        "UPDATE agent_runs SET locked_until = now() - interval '1 s' WHERE id = :id"
                    ),
                    {"id": run.id},
                )
            return await queue.reap_expired()

        await wait_until(expire_and_reap, within=10, what="the lease to be reaped")

        async def second_attempt_running() -> bool:
            current = await queue.get_run(run.id, tenant_id=None)
            return current.attempts == 2 and current.status is Status.LEASED

        await wait_until(second_attempt_running, within=10, what="the re-claim")
        await wait_until(lambda: not running(first_shell), within=5, what="the old shell killed")
        (second_shell,) = await wait_until(sleepers, within=10, what="the second shell")

        # The newer claim's lease is still renewed after the older attempt ended.
        async def locked_until() -> datetime:
            async with engine.connect() as conn:
                return (
                    await conn.execute(
                        text("SELECT locked_until FROM agent_runs WHERE id = :id"), {"id": run.id}
                    )
                ).scalar_one()

        before = await locked_until()
        await wait_until(
            lambda: _later(locked_until, before), within=5, what="a renewal of the new lease"
        )

        await queue.request_cancel(run.id, tenant_id=None)
        done = await wait_finished(queue, run.id, within=5)
        assert done.status is Status.CANCELLED and done.attempts == 2
        await wait_until(lambda: not running(second_shell), within=5, what="the new shell killed")
        check_event_log(await queue.read_events(run.id))


async def _later(read: Callable[[], Awaitable[datetime]], before: datetime) -> bool:
    return await read() > before
