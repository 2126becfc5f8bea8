"""When a schedule's slots fall: five-field cron expressions in an IANA time zone, or a fixed
interval. Cron arithmetic is cronsim's (the parser behind Healthchecks.io): it iterates both
ways, and across daylight-saving changes it does what cron does (a 02:30 that does not exist
runs at 03:00, one that happens twice runs once), in the schedule's own zone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from app.errors import Refused

MIN_EVERY_S = 1.0
MAX_EVERY_S = 366 * 86400.0
_TICK = timedelta(microseconds=1)


class ScheduleInvalid(Refused):
    """A schedule's timing is not acceptable."""


@dataclass(frozen=True, slots=True)
class Timing:
    """Exactly one of ``cron`` and ``every_s``, and the zone a cron expression is read in."""

    cron: str | None
    every_s: float | None
    timezone: str = "UTC"

    def check(self) -> Timing:
        """This timing, or :class:`ScheduleInvalid` naming what is wrong."""
        if (self.cron is None) == (self.every_s is None):
            raise ScheduleInvalid("invalid_schedule", "give exactly one of cron and every_s")
        zone = self.zone()
        if self.every_s is not None and not (MIN_EVERY_S <= self.every_s <= MAX_EVERY_S):
            raise ScheduleInvalid(
                "invalid_interval", f"every_s must be between {MIN_EVERY_S:g} and {MAX_EVERY_S:g} seconds"
            )
        if self.cron is not None:
            # cronsim also takes a sixth (seconds) field; the contract is classic five-field cron.
            if len(self.cron.split()) != 5:
                raise ScheduleInvalid("invalid_cron", "cron takes five fields: minute hour day month weekday")
            try:
                next(CronSim(self.cron, datetime.now(zone)))
            except (CronSimError, StopIteration) as exc:
                raise ScheduleInvalid("invalid_cron", f"invalid cron expression: {exc}") from exc
        return self

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ScheduleInvalid("unknown_timezone", f"unknown time zone {self.timezone!r}") from exc

    def first_after(self, moment: datetime, *, anchor: datetime | None = None) -> datetime:
        """The first slot strictly after ``moment``. An interval's slots are ``anchor + k·every_s``
        (``anchor`` defaults to ``moment``, so a new schedule's first slot is one interval away)."""
        if self.every_s is not None:
            if anchor is None:
                return moment + timedelta(seconds=self.every_s)
            steps = math.floor((moment - anchor).total_seconds() / self.every_s) + 1
            return anchor + timedelta(seconds=steps * self.every_s)
        return next(CronSim(str(self.cron), moment.astimezone(self.zone())))

    def latest_due(self, now: datetime, *, next_run_at: datetime) -> tuple[datetime, datetime]:
        """``(slot, next slot)`` for a schedule due at ``next_run_at <= now``: the latest slot
        that has come, so that after downtime one run makes up for every missed slot, and the
        first slot after ``now``."""
        if self.every_s is not None:
            steps = math.floor((now - next_run_at).total_seconds() / self.every_s)
            slot = next_run_at + timedelta(seconds=steps * self.every_s)
            return slot, slot + timedelta(seconds=self.every_s)
        slot = next(CronSim(str(self.cron), (now + _TICK).astimezone(self.zone()), reverse=True))
        return max(slot, next_run_at), self.first_after(now)
