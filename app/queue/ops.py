"""Operators' views and actions: requeue, stats, metrics depth, tenant caps."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from app.domain import Run, Status, Usage
from app.errors import NotRequeueable, RunNotFound
from app.queue.codec import events_params
from app.queue.runs import GET_RUN
from app.queue.statements import statement
from app.queue.store import Store

REQUEUE = statement("requeue")
COUNT_BY_STATUS = statement("count_by_status")
INFLIGHT_BY_TENANT = statement("inflight_by_tenant")
OLDEST_PENDING_AGE = statement("oldest_pending_age")
DEAD_SINCE = statement("dead_since")
QUEUE_DEPTH = statement("queue_depth")
SET_TENANT_LIMIT = statement("set_tenant_limit")
GET_TENANT_LIMIT = statement("get_tenant_limit")
USAGE_BY_TENANT = statement("usage_by_tenant")
RECENT_QUEUE_SAMPLES = statement("recent_queue_samples")


@dataclass(frozen=True, slots=True)
class QueueSample:
    """The queue at one minute (the reaper samples it), and the runs finished in the minute before."""

    at: datetime
    pending: int
    leased: int
    finished: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    by_status: dict[str, int]
    inflight_by_tenant: dict[str, int]
    oldest_pending_age_s: float
    dead_last_hour: int
    usage_last_24h: dict[str, Usage] = field(default_factory=dict)
    last_hour: list[QueueSample] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class QueueDepth:
    pending: int
    leased: int
    oldest_pending_age_s: float
    waiting: int = 0
    waiting_for_turn: int = 0  # due runs held back by an earlier run of their thread


class Ops(Store):
    async def requeue(self, run_id: uuid.UUID) -> Run:
        """Admin: a dead or cancelled run back to pending at attempt 0, history kept."""
        params = {"run_id": run_id, "aging_s": self.aging_s, **events_params([("run.queued", {"requeued": True})])}
        async with self._tx() as conn:
            row = (await conn.execute(REQUEUE, params)).first()
            if row is None:
                exists = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": None})).first()
        if row is None:
            raise NotRequeueable(str(run_id)) if exists else RunNotFound(str(run_id))
        return Run.from_row(row)

    async def stats(self, *, dead_window_s: float = 3600.0) -> QueueStats:
        """Counts by status, in-flight per tenant, oldest runnable pending age, recent dead."""
        async with self._tx() as conn:
            counts = {r.status: r.n for r in await conn.execute(COUNT_BY_STATUS)}
            inflight = {r.tenant_id: r.n for r in await conn.execute(INFLIGHT_BY_TENANT)}
            oldest = float((await conn.execute(OLDEST_PENDING_AGE)).scalar() or 0)
            dead = int((await conn.execute(DEAD_SINCE, {"window_s": dead_window_s})).scalar() or 0)
            usage = {
                r.tenant_id: Usage(int(r.input_tokens), int(r.output_tokens), int(r.model_calls), int(r.tool_calls))
                for r in await conn.execute(USAGE_BY_TENANT)
            }
            samples = [QueueSample(*r) for r in await conn.execute(RECENT_QUEUE_SAMPLES)]
        return QueueStats(
            by_status={s.value: counts.get(s.value, 0) for s in Status},
            inflight_by_tenant=inflight,
            oldest_pending_age_s=oldest,
            dead_last_hour=dead,
            usage_last_24h=usage,
            last_hour=samples,
        )

    async def queue_depth(self) -> QueueDepth:
        """Pending and leased counts and the oldest runnable pending age; never reads history."""
        async with self._tx() as conn:
            row = (await conn.execute(QUEUE_DEPTH)).one()
        return QueueDepth(
            pending=row.pending,
            leased=row.leased,
            oldest_pending_age_s=float(row.oldest_pending_age_s),
            waiting=row.waiting,
            waiting_for_turn=row.waiting_for_turn,
        )

    async def set_tenant_limit(self, *, tenant_id: str, max_inflight: int) -> None:
        """Override the in-flight cap of one tenant (0 = no cap)."""
        async with self._tx() as conn:
            await conn.execute(SET_TENANT_LIMIT, {"tenant_id": tenant_id, "max_inflight": max_inflight})
        self._limits_checked_at = float("-inf")

    async def tenant_limit(self, tenant_id: str) -> int | None:
        async with self._tx() as conn:
            return (await conn.execute(GET_TENANT_LIMIT, {"tenant_id": tenant_id})).scalar()
