"""The worker registry as operators see it: every worker process that is up, idle ones
included, next to the leases it holds (``GET /admin/workers``, ``runq workers``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.queue.statements import statement
from app.queue.store import Store

LIST_WORKERS = statement("list_workers")
LIVE_LEASES = statement("live_leases")
FORGET_WORKER = statement("forget_worker")
PASS_WAKEUPS = statement("pass_wakeups")


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker: its registered row (``None`` fields when it holds leases but has no row, e.g.
    a worker of a version before the registry, or one the reaper forgot while it was stalled)."""

    worker_id: str
    host: str | None = None
    pid: int | None = None
    version: str | None = None
    slots: int | None = None
    slots_in_use: int | None = None
    started_at: datetime | None = None
    last_beat_at: datetime | None = None
    leases: list[dict[str, Any]] = field(default_factory=list)


class Workers(Store):
    async def list_workers(self) -> list[WorkerView]:
        """Registered workers and the workers of live leases, each with its leases."""
        async with self._tx() as conn:
            registered = (await conn.execute(LIST_WORKERS)).all()
            leased = (await conn.execute(LIVE_LEASES)).all()
        leases: dict[str, list[dict[str, Any]]] = {}
        for r in leased:
            leases.setdefault(r.locked_by, []).append(
                {
                    "run_id": r.id,
                    "tenant_id": r.tenant_id,
                    "attempt": r.attempts,
                    "lease_age_s": float(r.lease_age_s or 0),
                    "heartbeat_at": r.heartbeat_at,
                    "locked_until": r.locked_until,
                }
            )
        workers = [WorkerView(**r._asdict(), leases=leases.pop(r.worker_id, [])) for r in registered]
        return workers + [WorkerView(worker_id=w, leases=held) for w, held in leases.items()]

    async def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row on its clean exit, so it is not listed until the reaper's pass."""
        async with self._statement() as conn:
            await conn.execute(FORGET_WORKER, {"worker_id": worker_id})

    async def pass_wakeups(self, runs: int) -> None:
        """Wake other workers with free slots for ``runs`` runs this worker cannot take."""
        async with self._statement() as conn:
            await conn.execute(PASS_WAKEUPS, {"runs": runs})
