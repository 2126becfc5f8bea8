"""The heartbeat: one batched lease renewal per interval for every run this worker holds, which
also registers the worker (idle or not) for operators; its row goes when the heartbeat stops.

It runs on a thread of its own, with its own event loop, engine and :class:`Queue` (an
engine's connections belong to the loop that opened them). An agent that blocks the
worker's event loop, with CPU-bound work or a blocking library call, must not cost it the
lease; and a lost lease or a cancel request must reach the run's tools even then, so the
heartbeat kills their process groups itself before asking the loop to stop the run.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import uuid
from types import TracebackType
from typing import Protocol

from app.backoff import Backoff
from app.db.engine import create_engine
from app.domain import WorkerInfo
from app.errors import DatabaseUnavailable
from app.metrics import HEARTBEAT_DURATION
from app.queue import Queue

log = logging.getLogger(__name__)


class LeaseHolder(Protocol):
    """A run the heartbeat renews; both callbacks are invoked on the heartbeat thread."""

    @property
    def lease_id(self) -> uuid.UUID: ...

    def lease_lost(self) -> None: ...

    def cancel_requested(self) -> None: ...


class Heartbeat:
    """Use as ``with Heartbeat(...) as heartbeat:``; :meth:`hold` and :meth:`drop` runs inside."""

    def __init__(
        self,
        *,
        database_url: str,
        worker: WorkerInfo,
        lease_s: float,
        interval_s: float,
        prepared_statements: bool | None = None,  # unset: RUNQ_DB_PREPARED_STATEMENTS
    ) -> None:
        self._database_url = database_url
        self._prepared_statements = prepared_statements
        self._worker = worker
        self._lease_s = lease_s
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._held: dict[uuid.UUID, LeaseHolder] = {}
        self._renewed_at: dict[uuid.UUID, float] = {}  # monotonic time of the last renewal
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # registered workers with a free slot, as of the last beat (read by the claim loop)
        self.idle_workers = 1

    def hold(self, run_id: uuid.UUID, holder: LeaseHolder) -> None:
        with self._lock:
            self._held[run_id] = holder
            self._renewed_at[run_id] = time.monotonic()

    def drop(self, run_id: uuid.UUID, holder: LeaseHolder) -> None:
        """Stop renewing ``holder``'s lease (not a newer claim of the same run)."""
        with self._lock:
            if self._held.get(run_id) is holder:
                del self._held[run_id]
                del self._renewed_at[run_id]

    def __enter__(self) -> Heartbeat:
        # The thread inherits the caller's log fields (worker_id).
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._main,), name="runq-heartbeat", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self._lease_s)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        engine = create_engine(
            self._database_url,
            pool_size=1,
            application_name="runq-heartbeat",
            prepared_statements=self._prepared_statements,
        )
        queue = Queue(engine, lease_s=self._lease_s)
        try:
            # The first beat at once, so a worker is listed before its first claim. After a
            # failed one the next comes sooner (backing off to 2 s at most): a failover shorter
            # than the lease then costs no run its lease.
            backoff = Backoff()
            wait_s = 0.0
            while not self._stopped.wait(wait_s):
                if loop.run_until_complete(self._beat(queue)):
                    backoff.reset()
                    wait_s = self._interval_s
                else:
                    wait_s = min(backoff.next(), self._interval_s)
            loop.run_until_complete(self._forget(queue))
        finally:
            loop.run_until_complete(engine.dispose())
            loop.close()

    async def _beat(self, queue: Queue) -> bool:
        """Renew every lease held; False when the database did not answer."""
        with self._lock:
            held = dict(self._held)
        started = time.perf_counter()
        try:
            check = await queue.renew_leases({run_id: h.lease_id for run_id, h in held.items()}, worker=self._worker)
        except Exception as exc:
            # A short outage costs nothing: the runs go on. But once a lease may have expired
            # unrenewed, another worker may hold the run: stop it, as if the lease were lost.
            if isinstance(exc, DatabaseUnavailable):
                log.warning("lease renewal failed: %s", exc)
            else:
                log.exception("lease renewal failed")
            self._expire_unrenewed(held)
            return False
        HEARTBEAT_DURATION.observe(time.perf_counter() - started)
        self.idle_workers = check.idle_workers
        renewed_at = time.monotonic()
        with self._lock:
            for run_id in held.keys() - check.lost:
                if run_id in self._renewed_at:
                    self._renewed_at[run_id] = renewed_at
        for run_id in check.lost:
            held[run_id].lease_lost()
        for run_id in check.cancel_requested - check.lost:
            held[run_id].cancel_requested()
        return True

    async def _forget(self, queue: Queue) -> None:
        # Left behind if the database is down now: the reaper deletes it once it is stale.
        try:
            await queue.forget_worker(self._worker.worker_id)
        except DatabaseUnavailable as exc:
            log.warning("could not unregister the worker: %s", exc)

    def _expire_unrenewed(self, held: dict[uuid.UUID, LeaseHolder]) -> None:
        # Renewals start before the agent's first write and keep the margin of one interval.
        deadline = time.monotonic() - (self._lease_s - self._interval_s)
        with self._lock:
            expired = [run_id for run_id in held if self._renewed_at.get(run_id, deadline) < deadline]
        for run_id in expired:
            held[run_id].lease_lost()
