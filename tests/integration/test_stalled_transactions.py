"""A process that stops inside one of its transactions must not stop the others (found by the soak).

A worker frozen (SIGSTOP, a VM pause, a blocked event loop) between a statement and its COMMIT
keeps that transaction's locks for as long as it is frozen: in the heartbeat's renewal, the row
of every run it holds, which the reaper then skips, so none of its runs goes to another worker;
in a reaper pass, the reaper's advisory lock, so no expired lease is reaped anywhere. The soak
saw frozen workers keep all their runs for ten seconds. The server now ends such a transaction
after one lease of idleness (``idle_in_transaction_session_timeout``, set for that transaction).

The freeze is made deterministic: a hook sleeps, blocking its thread's event loop, right after
the statement that took the locks has run.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.domain import Status, WorkerInfo
from app.queue import Queue
from tests.worker_support import enqueue_demo, wait_until

LEASE_S = 1.0
FROZEN_S = 8.0  # far longer than a lease: the others must not wait for the thaw


@contextmanager
def frozen_after(database_url: str, marker: str, work: Callable[[Queue], Any]) -> Iterator[threading.Thread]:
    """Run ``work`` on a queue of its own in another thread, which freezes for ``FROZEN_S``
    right after executing the statement containing ``marker`` (its transaction still open)."""
    engine = create_engine(database_url, pool_size=1)

    @event.listens_for(engine.sync_engine, "after_cursor_execute")
    def freeze(conn: object, cursor: object, statement: str, *args: object) -> None:
        if marker in statement:
            time.sleep(FROZEN_S)

    def main() -> None:
        async def go() -> None:
            try:
                await work(Queue(engine, lease_s=LEASE_S))
            except Exception:  # the server ended its session: what we want
                pass
            finally:
                await engine.dispose()

        asyncio.run(go())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(FROZEN_S + 10)


async def test_a_worker_frozen_in_its_lease_renewal_does_not_keep_its_runs(database_url: str, engine: AsyncEngine) -> None:
    queue = Queue(engine, lease_s=LEASE_S)
    run = await enqueue_demo(queue)
    [claim] = await queue.claim_batch(worker_id="frozen:1:x", limit=1)

    with frozen_after(database_url, "renewed AS", lambda q: q.renew_leases({run.id: claim.lease_id}, worker=WorkerInfo.start(slots=1))):
        started = time.monotonic()

        async def reaped() -> bool:
            await queue.reap_expired()
            return (await queue.get_run(run.id, tenant_id=None)).status is Status.PENDING

        await wait_until(reaped, within=FROZEN_S - 3, what="the frozen worker's run to be reaped")
        assert time.monotonic() - started < FROZEN_S - 3


async def test_a_worker_frozen_in_a_reaper_pass_does_not_stop_reaping(database_url: str, engine: AsyncEngine) -> None:
    queue = Queue(engine, lease_s=LEASE_S)
    run = await enqueue_demo(queue)
    await queue.claim_batch(worker_id="crashed:1:x", limit=1)

    with frozen_after(database_url, "runq.reaper", lambda q: q.reap_expired()):
        await asyncio.sleep(0.5)  # let it take the reaper's lock (the proof does not depend on it)

        async def reaped() -> bool:
            await queue.reap_expired()
            return (await queue.get_run(run.id, tenant_id=None)).status is Status.PENDING

        await wait_until(reaped, within=FROZEN_S - 3, what="another worker to reap")
