"""Schedules (docs/schedules.md): create, read, pause, delete, and firing due slots as runs.

Firing happens in the workers' reaper pass, under the reaper's advisory lock and the due rows'
locks, in one transaction: a slot becomes one run cluster-wide however many workers run. The
slot's time is also the run's idempotency key, so even a repeat of a slot inserts nothing.

A schedule the pass cannot fire — its slot cannot be computed (a time zone this worker's tzdata
lacks), or PostgreSQL refuses its run — is parked: its reason is stored and shown, and the pass
leaves it alone for ``PARK_S`` while every other schedule fires. A slot is a create like any
other: one its tenant's limits refuse now stays due until their ``Retry-After``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.cron import Timing
from app.db.errors import server_message
from app.domain import Schedule
from app.errors import LimitExceeded, ScheduleNotFound
from app.queue.claims import BOUND_IDLE_TRANSACTION
from app.queue.codec import dumps, page_params, schedule_from_row
from app.queue.maintenance import REAPER_LOCK
from app.queue.rowwise import report_failed_row, without_failing_rows
from app.queue.statements import statement
from app.queue.store import Store

DATABASE_NOW = statement("database_now")
CREATE_SCHEDULE = statement("create_schedule")
GET_SCHEDULE = statement("get_schedule")
LOCK_SCHEDULE = statement("lock_schedule")
LIST_SCHEDULES = statement("list_schedules")
UPDATE_SCHEDULE = statement("update_schedule")
SEARCH_SCHEDULES = statement("search_schedules")
COUNT_SCHEDULES = statement("count_schedules")
DELETE_SCHEDULE = statement("delete_schedule")
DUE_SCHEDULES = statement("due_schedules")
FIRE_SCHEDULES = statement("fire_schedules")
PARK_SCHEDULES = statement("park_schedules")
LOCK_SLOT_OWNERS = statement("lock_slot_owners")
NEXT_SCHEDULE_DUE_IN = statement("next_schedule_due_in")

PARK_S = 60.0  # a parked schedule is tried again after this long (a fixed one fires then)
MAX_REASON_CHARS = 500
STEP = "schedules"  # in runq_maintenance_errors_total{step} (app/queue/rowwise.py)


@dataclass(frozen=True, slots=True)
class Slot:
    """A due schedule's slot to fire: the run's key, and the schedule's next slot after it."""

    key: str
    next_at: datetime


@dataclass(frozen=True, slots=True)
class SchedulesFired:
    """What one pass over the due schedules did: the ``(schedule_id, run_id)`` pairs of the
    runs it created, how many slots wait for their tenant's create limits, and the schedules
    it parked with their reasons."""

    runs: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    held: int = 0
    parked: dict[uuid.UUID, str] = field(default_factory=dict)


def slot_key(schedule_id: uuid.UUID, slot: datetime) -> str:
    """The idempotency key of a slot's run: the schedule and the slot's instant in UTC."""
    return f"schedule:{schedule_id}:{slot.astimezone(UTC).isoformat()}"


def timing_of(schedule: Schedule) -> Timing:
    return Timing(cron=schedule.cron, every_s=schedule.every_s, timezone=schedule.timezone)


def _slots(rows: Sequence[Row[Any]], faults: dict[uuid.UUID, str]) -> dict[uuid.UUID, Slot]:
    """The slot of each due schedule, by its id; one whose slot cannot be computed goes to
    ``faults`` with the reason (whatever the error: it is that row's, and no other's)."""
    slots = {}
    for row in rows:
        try:
            schedule = schedule_from_row(row)
            # after downtime past its end, the last slot before the end (the due query saw one)
            until = row.db_now if schedule.ends_at is None else min(row.db_now, schedule.ends_at)
            slot, next_at = timing_of(schedule).latest_due(until, next_run_at=schedule.next_run_at)
        except Exception as exc:  # e.g. a zone this worker's tzdata lacks
            report_failed_row(STEP, row.id, exc)
            faults[row.id] = str(exc) or type(exc).__name__
            continue
        slots[schedule.id] = Slot(slot_key(schedule.id, slot), next_at)
    return slots


class Keep(enum.Enum):
    """An argument left as it is (where ``None`` is a value)."""

    KEEP = "keep"


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    """Which schedules a search or count takes (``None``: any): of these agents, in this thread,
    paused or not, whose run input contains this JSON object."""

    agents: Sequence[str] | None = None
    thread_id: uuid.UUID | None = None
    paused: bool | None = None
    input_contains: Mapping[str, Any] = field(default_factory=dict)

    def params(self, tenant_id: str | None) -> dict[str, Any]:
        """The parameters of ``schedules_matching``."""
        return {
            "tenant_id": tenant_id,
            "agents": None if self.agents is None else list(self.agents),
            "thread_id": self.thread_id,
            "paused": self.paused,
            "input_contains": dumps(self.input_contains),
        }


class Schedules(Store):
    async def create_schedule(
        self,
        *,
        tenant_id: str,
        timing: Timing,
        agent: str,
        input: Mapping[str, Any],
        budget: Mapping[str, Any],
        priority: int,
        max_attempts: int,
        thread_id: uuid.UUID | None = None,
        webhook: Mapping[str, Any] | None = None,
        ends_at: datetime | None = None,
    ) -> Schedule:
        """Store a schedule, first due at its first slot after the database's now;
        :class:`LimitExceeded` when the tenant is at its ``max_schedules``, and nothing is stored."""
        self.refusals.check(tenant_id, "schedule")
        async with self._tx() as conn:
            now = (await conn.execute(DATABASE_NOW)).scalar_one()
            params = {
                "tenant_id": tenant_id,
                "cron": timing.cron,
                "every_s": timing.every_s,
                "timezone": timing.timezone,
                "agent": agent,
                "input": dumps(input),
                "budget": dumps(budget),
                "priority": priority,
                "max_attempts": max_attempts,
                "thread_id": thread_id,
                "webhook": dumps(webhook) if webhook is not None else None,
                "next_run_at": timing.first_after(now),
                "ends_at": ends_at,
                "max_schedules": self.limits.max_schedules,
            }
            row = (await conn.execute(CREATE_SCHEDULE, params)).one()
        if row.at_cap is not None:
            raise self.refusals.remember(
                "schedule",
                LimitExceeded(tenant_id=tenant_id, limit="schedules", quota=row.at_cap, retry_after_s=1.0),
            )
        return schedule_from_row(row)

    async def get_schedule(self, schedule_id: uuid.UUID, *, tenant_id: str | None) -> Schedule:
        """The schedule, or :class:`ScheduleNotFound` (also for another tenant's)."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_SCHEDULE, {"id": schedule_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise ScheduleNotFound(str(schedule_id))
        return schedule_from_row(row)

    async def list_schedules(
        self, *, tenant_id: str | None, limit: int = 50, before: tuple[datetime, uuid.UUID] | None = None
    ) -> list[Schedule]:
        params = {"tenant_id": tenant_id, **page_params(before, limit)}
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_SCHEDULES, params)).all()
        return [schedule_from_row(r) for r in rows]

    async def set_schedule_paused(self, schedule_id: uuid.UUID, *, tenant_id: str | None, paused: bool) -> Schedule:
        """Pause, or resume from the first slot after now: the slots a pause skipped never run."""
        return await self.update_schedule(schedule_id, tenant_id=tenant_id, paused=paused)

    async def update_schedule(
        self,
        schedule_id: uuid.UUID,
        *,
        tenant_id: str | None,
        paused: bool | None = None,
        timing: Timing | None = None,
        input: Mapping[str, Any] | None = None,
        webhook: Mapping[str, Any] | None = None,
        ends_at: datetime | Keep | None = Keep.KEEP,
    ) -> Schedule:
        """Change what is given (``None``: unchanged; ``ends_at``: unless :data:`Keep.KEEP`, so
        ``None`` removes the end). A new timing starts from its first slot after now, as a resume
        does; :class:`ScheduleNotFound` for another tenant's."""
        async with self._tx() as conn:
            row = (await conn.execute(LOCK_SCHEDULE, {"id": schedule_id, "tenant_id": tenant_id})).first()
            if row is None:
                raise ScheduleNotFound(str(schedule_id))
            schedule = schedule_from_row(row)
            new_timing = timing or timing_of(schedule)
            next_run_at = schedule.next_run_at
            if timing is not None:
                next_run_at = timing.first_after(row.db_now)
            elif schedule.paused and paused is False:
                next_run_at = new_timing.first_after(row.db_now, anchor=schedule.next_run_at)
            webhook = schedule.webhook if webhook is None else webhook
            params = {
                "id": schedule_id,
                "cron": new_timing.cron,
                "every_s": new_timing.every_s,
                "timezone": new_timing.timezone,
                "ends_at": schedule.ends_at if ends_at is Keep.KEEP else ends_at,
                "input": dumps(schedule.input if input is None else input),
                "webhook": None if webhook is None else dumps(webhook),
                "paused": schedule.paused if paused is None else paused,
                "next_run_at": next_run_at,
            }
            return schedule_from_row((await conn.execute(UPDATE_SCHEDULE, params)).one())

    async def search_schedules(
        self,
        *,
        tenant_id: str | None,
        matching: ScheduleFilter,
        sort_by: str = "created_at",
        descending: bool = True,
        limit: int = 10,
        offset: int = 0,
    ) -> list[Schedule]:
        """One page of the schedules ``matching``, ordered by ``sort_by`` (``created_at``,
        ``updated_at``, ``next_run_at``)."""
        params = matching.params(tenant_id) | {
            "sort_by": sort_by,
            "descending": descending,
            "limit": limit,
            "offset": offset,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(SEARCH_SCHEDULES, params)).all()
        return [schedule_from_row(r) for r in rows]

    async def count_schedules(self, *, tenant_id: str | None, matching: ScheduleFilter) -> int:
        async with self._statement() as conn:
            return int((await conn.execute(COUNT_SCHEDULES, matching.params(tenant_id))).scalar_one())

    async def delete_schedule(self, schedule_id: uuid.UUID, *, tenant_id: str | None) -> None:
        async with self._statement() as conn:
            deleted = (await conn.execute(DELETE_SCHEDULE, {"id": schedule_id, "tenant_id": tenant_id})).first()
        if deleted is None:
            raise ScheduleNotFound(str(schedule_id))

    async def fire_due_schedules(self, *, batch: int = 500) -> SchedulesFired:
        """One run per due schedule for its latest slot, the schedule moved past now; a schedule
        that cannot be fired is parked, and the others fire. One reaper at a time cluster-wide."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return SchedulesFired()
            rows = (await conn.execute(DUE_SCHEDULES, {"batch": batch})).all()
            faults: dict[uuid.UUID, str] = {}
            slots = _slots(rows, faults)
            if slots:  # see lock_slot_owners: no deadlock with a create, and max_pending exact
                await conn.execute(LOCK_SLOT_OWNERS, {"ids": list(slots)})

            async def fire(ids: Sequence[uuid.UUID]) -> Sequence[Row[Any]]:
                return (await conn.execute(FIRE_SCHEDULES, self._fire_params(ids, slots))).all()

            def refused(schedule_id: uuid.UUID, exc: Exception) -> None:
                faults[schedule_id] = f"PostgreSQL refused its run: {server_message(exc)}"

            fired = await without_failing_rows(conn, list(slots), fire, step=STEP, failed=refused)
            await _park(conn, faults)
        return SchedulesFired(
            runs=[(r.schedule_id, r.run_id) for r in fired if r.run_id is not None],
            held=sum(1 for r in fired if r.held_s is not None),
            parked=faults,
        )

    def _fire_params(self, ids: Sequence[uuid.UUID], slots: Mapping[uuid.UUID, Slot]) -> dict[str, Any]:
        return {
            "ids": list(ids),
            "slot_keys": [slots[i].key for i in ids],
            "next_ats": [slots[i].next_at for i in ids],
            "aging_s": self.aging_s,
            "limit_per_s": self.limits.create_per_s,
            "limit_burst": self.limits.create_burst,
            "limit_max_pending": self.limits.max_pending,
        }

    async def next_schedule_due_in(self) -> float | None:
        """Seconds until the earliest active schedule is due (negative once it is), or ``None``
        without one: the reaper wakes for it, so a slot does not wait for the next regular pass."""
        async with self._statement() as conn:
            due_in = (await conn.execute(NEXT_SCHEDULE_DUE_IN)).scalar()
        return None if due_in is None else float(due_in)


async def _park(conn: AsyncConnection, faults: Mapping[uuid.UUID, str]) -> None:
    """Each schedule of ``faults`` shows its reason and is left alone for ``PARK_S``."""
    if faults:
        reasons = [reason[:MAX_REASON_CHARS] for reason in faults.values()]
        await conn.execute(PARK_SCHEDULES, {"ids": list(faults), "reasons": reasons, "retry_s": PARK_S})
