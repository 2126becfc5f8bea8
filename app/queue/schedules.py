"""Schedules (docs/schedules.md): create, read, pause, delete, and firing due slots as runs.

Firing happens in the workers' reaper pass, under the reaper's advisory lock and the due rows'
locks, in one transaction: a slot becomes one run cluster-wide however many workers run. The
slot's time is also the run's idempotency key, so even a repeat of a slot inserts nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.cron import Timing
from app.domain import Schedule
from app.errors import ScheduleNotFound
from app.queue.claims import BOUND_IDLE_TRANSACTION
from app.queue.codec import dumps, page_params, schedule_from_row
from app.queue.limits import pending_room
from app.queue.maintenance import REAPER_LOCK
from app.queue.statements import statement
from app.queue.store import LimitDefaults, Store

DATABASE_NOW = statement("database_now")
CREATE_SCHEDULE = statement("create_schedule")
GET_SCHEDULE = statement("get_schedule")
LOCK_SCHEDULE = statement("lock_schedule")
LIST_SCHEDULES = statement("list_schedules")
SET_SCHEDULE_PAUSED = statement("set_schedule_paused")
DELETE_SCHEDULE = statement("delete_schedule")
DUE_SCHEDULES = statement("due_schedules")
FIRE_SCHEDULES = statement("fire_schedules")
NEXT_SCHEDULE_DUE_IN = statement("next_schedule_due_in")



def slot_key(schedule_id: uuid.UUID, slot: datetime) -> str:
    """The idempotency key of a slot's run: the schedule and the slot's instant in UTC."""
    return f"schedule:{schedule_id}:{slot.astimezone(UTC).isoformat()}"


def timing_of(schedule: Schedule) -> Timing:
    return Timing(cron=schedule.cron, every_s=schedule.every_s, timezone=schedule.timezone)


async def _with_room(conn: AsyncConnection, rows: Sequence[Row[Any]], limits: LimitDefaults) -> list[Row[Any]]:
    """The due schedules whose tenant has room under its ``max_pending`` (docs/limits.md), the
    earliest first. The others are left due, not advanced: their slot fires once there is room
    (after downtime-like waits, only the latest missed slot, as ever)."""
    room = await pending_room(conn, {row.tenant_id for row in rows}, limits)
    kept = []
    for row in rows:
        left = room.get(row.tenant_id)
        if left is None or left > 0:
            kept.append(row)
            if left is not None:
                room[row.tenant_id] = left - 1
    return kept


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
    ) -> Schedule:
        """Store a schedule, first due at its first slot after the database's now."""
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
            }
            row = (await conn.execute(CREATE_SCHEDULE, params)).one()
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
        async with self._tx() as conn:
            row = (await conn.execute(LOCK_SCHEDULE, {"id": schedule_id, "tenant_id": tenant_id})).first()
            if row is None:
                raise ScheduleNotFound(str(schedule_id))
            schedule = schedule_from_row(row)
            next_run_at = schedule.next_run_at
            if schedule.paused and not paused:
                next_run_at = timing_of(schedule).first_after(row.db_now, anchor=schedule.next_run_at)
            params = {"id": schedule_id, "paused": paused, "next_run_at": next_run_at}
            return schedule_from_row((await conn.execute(SET_SCHEDULE_PAUSED, params)).one())

    async def delete_schedule(self, schedule_id: uuid.UUID, *, tenant_id: str | None) -> None:
        async with self._statement() as conn:
            deleted = (await conn.execute(DELETE_SCHEDULE, {"id": schedule_id, "tenant_id": tenant_id})).first()
        if deleted is None:
            raise ScheduleNotFound(str(schedule_id))

    async def fire_due_schedules(self, *, batch: int = 500) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """One run per due schedule for its latest slot, the schedule moved past now; the
        ``(schedule_id, run_id)`` pairs created. One reaper at a time cluster-wide."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            rows = (await conn.execute(DUE_SCHEDULES, {"batch": batch})).all()
            rows = await _with_room(conn, rows, self.limits)
            if not rows:
                return []
            ids, keys, next_ats = [], [], []
            for row in rows:
                schedule = schedule_from_row(row)
                slot, next_at = timing_of(schedule).latest_due(row.db_now, next_run_at=schedule.next_run_at)
                ids.append(schedule.id)
                keys.append(slot_key(schedule.id, slot))
                next_ats.append(next_at)
            params = {"ids": ids, "slot_keys": keys, "next_ats": next_ats, "aging_s": self.aging_s}
            fired = (await conn.execute(FIRE_SCHEDULES, params)).all()
        return [(row.schedule_id, row.run_id) for row in fired]

    async def next_schedule_due_in(self) -> float | None:
        """Seconds until the earliest active schedule is due (negative once it is), or ``None``
        without one: the reaper wakes for it, so a slot does not wait for the next regular pass."""
        async with self._statement() as conn:
            due_in = (await conn.execute(NEXT_SCHEDULE_DUE_IN)).scalar()
        return None if due_in is None else float(due_in)
