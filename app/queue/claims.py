"""The worker's side of a lease: claim runs, and keep them with heartbeats."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from sqlalchemy import Row

from app.domain import Claim, ClaimBatch, LeaseCheck, Run, WorkerInfo
from app.queue.channels import wake
from app.queue.statements import statement
from app.queue.store import Store

CLAIM_BATCH = statement("claim_batch")
_QUEUE_ORDER = itemgetter("queue_rank", "created_at")
# With in-flight caps: skip tenants at their cap, and within the candidates take no more of a
# tenant than its remaining room. Capped claims run one at a time (CLAIM_LOCK), so the
# in-flight counts they read are exact.
CLAIM_BATCH_CAPPED = statement("claim_batch_capped")
CLAIM_LOCK = statement("claim_lock")
HAS_TENANT_LIMITS = statement("has_tenant_limits")
RENEW_LEASES = statement("renew_leases")
# For the transactions whose locks others wait on or skip (a heartbeat's renewal holds the rows
# of all the worker's runs, a reaper pass the reaper's lock): a process that stops between a
# statement and its COMMIT (SIGSTOP, a VM pause, a blocked event loop) would keep them for as
# long as it is stopped, and no other worker could reap its runs, or any run. The server ends
# such a transaction after one lease of idleness instead. SET LOCAL: pooler-safe, this
# transaction only.
BOUND_IDLE_TRANSACTION = statement("bound_idle_transaction")


class Claims(Store):
    async def claim_batch(self, *, worker_id: str, limit: int) -> ClaimBatch:
        """Lease up to ``limit`` runs (SKIP LOCKED) and append each one's ``run.started``."""
        if limit <= 0:
            return ClaimBatch()
        params = {"worker_id": worker_id, "limit": limit, "lease_s": self.lease_s}
        capped = await self._caps_apply()
        rows: list[Row[Any]] = []
        if capped:
            async with self._tx() as conn:
                await conn.execute(CLAIM_LOCK)
                params |= {"default_cap": self.tenant_max_inflight, "scan": max(limit * 8, 64)}
                # The window of candidates can hold only tenants that reach their cap within
                # it (one tenant's backlog, say); look again, with those claims now counted,
                # so a free slot goes to the next tenant in this round, not a later one.
                while len(rows) < limit and (
                    more := (await conn.execute(CLAIM_BATCH_CAPPED, params | {"limit": limit - len(rows)})).all()
                ):
                    rows += more
        else:
            async with self._statement(self.claim_engine) as conn:
                rows += (await conn.execute(CLAIM_BATCH, params)).all()
        # each row's mapping taken once: every row._mapping is a new object (a third of this
        # loop's time when taken for each column read)
        mappings = [r._mapping for r in rows]
        outlook = mappings[0] if mappings else {}
        # queue order, whichever join order the plan of the statement's result took
        claimed = sorted((m for m in mappings if m["id"] is not None), key=_QUEUE_ORDER)
        batch = ClaimBatch(
            Claim(run=Run.from_mapping(m), lease_id=m["lease_id"], resume_state=m["resume_state"]) for m in claimed
        )
        batch.more = bool(claimed) and outlook["more"]
        batch.unclaimed = bool(claimed) and bool(outlook.get("unclaimed"))
        batch.lost = bool(outlook.get("lost"))
        return batch

    async def _caps_apply(self) -> bool:
        if self.tenant_max_inflight > 0:
            return True
        # Per-tenant overrides are rare; look for them every few seconds, not on every claim.
        now = time.monotonic()
        if now - self._limits_checked_at > 5.0:
            async with self._tx() as conn:
                self._has_limits = bool((await conn.execute(HAS_TENANT_LIMITS)).scalar())
            self._limits_checked_at = now
        return self._has_limits

    async def renew_leases(self, leases: Mapping[uuid.UUID, uuid.UUID], *, worker: WorkerInfo) -> LeaseCheck:
        """Extend every lease this worker still holds and register the worker, in one statement.

        Called with no lease too: the beat keeps an idle worker's row alive. Returns the runs
        whose lease is lost (the worker must stop them and write nothing more), the runs
        with a cancel request, and the number of registered workers with a free slot.
        """
        ordered = sorted(leases)  # a fixed lock order across workers' batches
        params = {
            "run_ids": ordered,
            "lease_ids": [leases[r] for r in ordered],
            "lease_s": self.lease_s,
            "worker_id": worker.worker_id,
            "host": worker.host,
            "pid": worker.pid,
            "version": worker.version,
            "slots": worker.slots,
            "wake_channel": wake(worker.worker_id),
        }
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            rows = (await conn.execute(RENEW_LEASES, params)).all()
        held = [r for r in rows if r.run_id is not None]
        return LeaseCheck(
            lost=frozenset(r.run_id for r in held if not r.kept),
            cancel_requested=frozenset(r.run_id for r in held if r.cancel),
            idle_workers=int(rows[0].idle_workers),
        )
