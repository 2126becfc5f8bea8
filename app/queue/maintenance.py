"""The reaper's passes: expired leases, stale workers, abandoned interactive runs (retention:
app/queue/partitions.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from app.domain import Run
from app.queue.claims import BOUND_IDLE_TRANSACTION
from app.queue.codec import events_params
from app.queue.rowwise import without_failing_rows
from app.queue.runs import REQUEST_CANCEL
from app.queue.statements import statement
from app.queue.store import Store

# FOR UPDATE SKIP LOCKED in each statement plus this advisory lock per pass: one reaper.
REAPER_LOCK = statement("reaper_lock")
PICK_EXPIRED = statement("pick_expired")
REAP_EXPIRED = statement("reap_expired")
FORGET_STALE_SUBSCRIBERS = statement("forget_stale_subscribers")
PICK_ABANDONED = statement("pick_abandoned")
FORGET_STALE_WORKERS = statement("forget_stale_workers")
SAMPLE_QUEUE = statement("sample_queue")


class Maintenance(Store):
    async def reap_expired(self, *, batch: int = 500) -> list[Run]:
        """Expired leases back to pending / dead / cancelled; one reaper at a time cluster-wide.
        A run whose change fails is left out of the batch (app/queue/rowwise.py)."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            run_ids = [r.id for r in await conn.execute(PICK_EXPIRED, {"batch": batch})]

            async def reap(ids: Sequence[uuid.UUID]) -> Sequence[Any]:
                return (await conn.execute(REAP_EXPIRED, {"run_ids": list(ids), "aging_s": self.aging_s})).all()

            rows = await without_failing_rows(conn, run_ids, reap, step="expired_leases")
        return [Run.from_row(r) for r in rows]

    async def forget_stale_workers(self) -> None:
        """Workers that stopped beating forgotten, the queue sampled once a minute (the admin
        charts); one reaper at a time cluster-wide."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return
            # A row silent for a lease: its leases have expired too, so it holds nothing.
            await conn.execute(FORGET_STALE_WORKERS, {"lease_s": self.lease_s})
            await conn.execute(SAMPLE_QUEUE)

    async def cancel_abandoned(self, *, batch: int = 500) -> list[Run]:
        """Interactive runs nobody has watched for their grace window: cancel, reason ``abandoned``."""
        cancel = {
            "tenant_id": None,
            "reason": "abandoned",
            **events_params([("run.cancel_requested", {"reason": "abandoned"})]),
        }
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            await conn.execute(FORGET_STALE_SUBSCRIBERS, {"presence_ttl_s": self.presence_ttl_s})
            picked = {"batch": batch, "presence_ttl_s": self.presence_ttl_s}
            run_ids = [r.id for r in await conn.execute(PICK_ABANDONED, picked)]

            async def request_cancel(ids: Sequence[uuid.UUID]) -> Sequence[Any]:
                return (await conn.execute(REQUEST_CANCEL, {"run_ids": list(ids), **cancel})).all()

            rows = await without_failing_rows(conn, run_ids, request_cancel, step="abandoned_runs")
        return [Run.from_row(r) for r in rows]
