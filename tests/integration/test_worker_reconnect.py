"""The worker outlives its database connections: LISTEN reconnects, the pool recovers."""

from __future__ import annotations

import asyncpg

from app.domain import Status
from app.queue import Queue
from tests.worker_support import enqueue_demo, in_process_worker, wait_finished, wait_until

LISTEN_APP = "runq-listen"


async def backends(admin: asyncpg.Connection, application_name: str) -> list[int]:
    """The server processes of the worker's sessions. Asked on a session of the test's own,
    straight to PostgreSQL: through PgBouncer the test's server connection may be one the
    worker named before, and would kill itself."""
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()",
        application_name,
    )
    return [row["pid"] for row in rows]


async def test_listen_reconnects_and_wakes_the_claim_loop_again(
    database_url: str, direct_database_url: str, queue: Queue
) -> None:
    admin = await asyncpg.connect(direct_database_url)
    try:
        # Polling is slower than the whole test: only a NOTIFY can start these runs in time.
        async with in_process_worker(database_url, poll_s=60):
            (listener,) = await wait_until(
                lambda: backends(admin, LISTEN_APP), within=5, what="the LISTEN connection"
            )
            first = await enqueue_demo(queue, steps=0)
            assert (await wait_finished(queue, first.id, within=5)).status is Status.DONE

            # Every connection of the worker goes at once, as in a database restart.
            victims = [listener]
            for name in ("runq-worker", "runq-heartbeat"):
                victims += await backends(admin, name)
            await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", victims)

            async def new_listener() -> list[int]:
                return [pid for pid in await backends(admin, LISTEN_APP) if pid != listener]

            await wait_until(new_listener, within=10, what="a new LISTEN connection")
            second = await enqueue_demo(queue, steps=1, step_s=0.01)
            assert (await wait_finished(queue, second.id, within=5)).status is Status.DONE
    finally:
        await admin.close()
