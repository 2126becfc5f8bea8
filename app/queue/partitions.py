"""History that scales: run_events partitioned by day, retention by dropping whole partitions.

Every event carries its run's ``history_at`` (the run's creation time, the table's partition
key), copied from the run row and moved with it by trigger (migration 0018), so all of a
run's events live in one partition and a stream's read prunes to it. The reaper (app/worker/reaper.py) calls, each
under the cluster-wide reaper lock:

- :meth:`History.create_event_partitions`: one partition per UTC day, ``DAYS_AHEAD`` days
  ahead (rows that went to the default partition meanwhile are moved into theirs);
- :meth:`History.rehome_unfinished`: a run still going ``GRACE_S`` after its ``history_at``
  gets ``history_at = now()``, its events moving with it by trigger;
- :meth:`History.drop_expired_partitions`: a partition whose day ended more than the
  retention plus ``GRACE_S`` ago holds only runs that finished before the retention window
  (a run still going would have been re-homed; a requeue re-homes too), so it is dropped whole;
- :meth:`History.purge_finished`: then the run rows of dropped days, in batches; the trigger
  that deletes their events finds nothing left. The history from before partitioning (one partition
  ``run_events_before_<day>``) is purged row by row as before, until it expires as well.

So a finished run is kept for the retention, and at most two days more (its day, and the day
of grace). DDL waits at most ``partition_lock_timeout`` for its locks and otherwise tries again
at the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy.exc import DBAPIError

from app.queue.claims import BOUND_IDLE_TRANSACTION
from app.queue.maintenance import REAPER_LOCK
from app.queue.statements import quote_literal, statement, template
from app.queue.store import Store

DAYS_AHEAD = 2
GRACE_S = 86400.0  # a day: how long a run may go on writing into its partition
REHOME_BATCH = 100
EVERYWHERE = datetime.max.replace(tzinfo=UTC)  # a purge bound above every history_at

PURGE_FINISHED = statement("purge_finished")
COUNT_PURGEABLE = statement("count_purgeable")
LIST_EVENT_PARTITIONS = statement("list_event_partitions")
PARTITION_LOCK_TIMEOUT = statement("partition_lock_timeout")
REHOME_UNFINISHED_RUNS = statement("rehome_unfinished_runs")
PARTITION_HAS_UNFINISHED_RUNS = statement("partition_has_unfinished_runs")
# DDL templates, filled per partition
CREATE_EVENT_PARTITION_TABLE = template("create_event_partition_table")
MOVE_DEFAULT_EVENTS = template("move_default_events")
ATTACH_EVENT_PARTITION = template("attach_event_partition")
DROP_EVENT_PARTITION = template("drop_event_partition")
_LOCK_NOT_AVAILABLE = "55P03"


@dataclass(frozen=True, slots=True)
class EventPartition:
    """One partition of run_events: ``[lo, hi)`` (``lo`` None: from the beginning)."""

    name: str
    is_default: bool
    lo: datetime | None
    hi: datetime | None
    expired: bool  # its day ended more than the retention plus the grace ago


def partition_name(day: date) -> str:
    return f"run_events_{day:%Y%m%d}"


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def missing_days(partitions: list[EventPartition], today: date, *, days_ahead: int = DAYS_AHEAD) -> list[date]:
    """Days from the end of the newest partition (or today) to ``today + days_ahead`` that
    no partition covers: gaps left while no reaper ran are filled too, so no day's events
    stay in the default partition."""
    ranged = [p for p in partitions if not p.is_default and p.hi is not None]
    ends = [p.hi.astimezone(UTC).date() for p in ranged if p.hi is not None]
    first = max(ends, default=today)
    first = min(first, today)
    return [
        first + timedelta(days=n)
        for n in range((today + timedelta(days=days_ahead) - first).days + 1)
        if not any(_covers(p, day_bounds(first + timedelta(days=n))[0]) for p in ranged)
    ]


def purge_before(partitions: list[EventPartition]) -> datetime:
    """Runs with ``history_at`` below this have no events left in a day partition: the start
    of the oldest day partition still there (the history from before partitioning, from
    ``MINVALUE``, counts as gone: it is purged row by row, as it always was)."""
    starts = [p.lo for p in partitions if not p.is_default and p.lo is not None]
    return min(starts) if starts else EVERYWHERE


def _covers(partition: EventPartition, at: datetime) -> bool:
    return (partition.lo is None or partition.lo <= at) and (partition.hi is None or at < partition.hi)


def _lock_not_available(exc: DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE


class History(Store):
    async def event_partitions(self, *, older_than_s: float = 0.0) -> list[EventPartition]:
        """run_events' partitions, oldest first, the default one last."""
        params = {"older_than_s": older_than_s, "grace_s": GRACE_S}
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_EVENT_PARTITIONS, params)).all()
        return [EventPartition(r.name, r.is_default, r.lo, r.hi, r.expired) for r in rows]

    async def create_event_partitions(self, *, today: date, days_ahead: int = DAYS_AHEAD) -> list[str]:
        """The partitions of the days up to ``today + days_ahead`` that are missing; the names made."""
        made = []
        for day in missing_days(await self.event_partitions(), today, days_ahead=days_ahead):
            if not await self.create_event_partition(day):
                break  # a lock was busy: the next pass goes on
            made.append(partition_name(day))
        return made

    async def create_event_partition(self, day: date) -> bool:
        name = partition_name(day)
        lo, hi = day_bounds(day)
        bounds = {"lo": quote_literal(lo.isoformat()), "hi": quote_literal(hi.isoformat())}
        try:
            async with self._tx() as conn:
                await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
                if not (await conn.execute(REAPER_LOCK)).scalar():
                    return False
                await conn.execute(PARTITION_LOCK_TIMEOUT)
                await conn.execute(CREATE_EVENT_PARTITION_TABLE.fill(partition=name))
                await conn.execute(MOVE_DEFAULT_EVENTS.fill(partition=name), {"lo": lo, "hi": hi})
                await conn.execute(ATTACH_EVENT_PARTITION.fill(partition=name, **bounds))
        except DBAPIError as exc:
            if _lock_not_available(exc):
                return False
            raise
        return True

    async def rehome_unfinished(self, *, batch: int = REHOME_BATCH) -> int:
        """Move runs still going a day after their ``history_at`` (and their events) to today:
        up to ``batch`` leased runs and as many others."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return 0
            result = await conn.execute(REHOME_UNFINISHED_RUNS, {"grace_s": GRACE_S, "batch": batch})
        return result.rowcount or 0

    async def drop_expired_partitions(self, *, older_than_s: float) -> list[str]:
        """Drop, oldest first, the day partitions past the retention; the names dropped. It
        stops at the first that still holds a run that is going (the re-homing moves it soon),
        so the ones dropped are always the oldest and :func:`purge_before` stays exact."""
        dropped = []
        for p in await self.event_partitions(older_than_s=older_than_s):
            if p.is_default or not p.expired or not await self._drop_partition(p):
                break
            dropped.append(p.name)
        return dropped

    async def _drop_partition(self, partition: EventPartition) -> bool:
        try:
            async with self._tx() as conn:
                await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
                if not (await conn.execute(REAPER_LOCK)).scalar():
                    return False
                going = {"lo": partition.lo, "hi": partition.hi}
                if (await conn.execute(PARTITION_HAS_UNFINISHED_RUNS, going)).scalar():
                    return False
                await conn.execute(PARTITION_LOCK_TIMEOUT)
                await conn.execute(DROP_EVENT_PARTITION.fill(partition=partition.name))
        except DBAPIError as exc:
            if _lock_not_available(exc):
                return False
            raise
        return True

    async def purge_finished(self, *, older_than_s: float, batch: int = 500, everywhere: bool = False) -> int:
        """Delete one batch of finished runs older than the age whose events are gone (the
        history from before partitioning: with its events, by trigger). ``everywhere`` (an
        operator's ``runq purge``) also takes runs whose day is still there, their events row
        by row: what the operator asked for goes now, not when its day expires."""
        before = EVERYWHERE if everywhere else purge_before(await self.event_partitions())
        params = {"older_than_s": older_than_s, "batch": batch, "before": before}
        async with self._tx() as conn:
            result = await conn.execute(PURGE_FINISHED, params)
        return result.rowcount or 0

    async def count_purgeable(self, *, older_than_s: float) -> int:
        """How many runs :meth:`purge_finished` ``everywhere`` would delete (``runq purge --dry-run``)."""
        params = {"older_than_s": older_than_s, "before": EVERYWHERE}
        async with self._statement() as conn:
            return int((await conn.execute(COUNT_PURGEABLE, params)).scalar_one())
