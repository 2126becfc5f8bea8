"""Which day partitions of run_events the reaper makes, and below what runs have no events left."""

from __future__ import annotations

from datetime import UTC, date, datetime

from app.queue.partitions import (
    EventPartition,
    day_bounds,
    missing_days,
    partition_name,
    purge_before,
)


def day(d: date) -> EventPartition:
    lo, hi = day_bounds(d)
    return EventPartition(partition_name(d), False, lo, hi, False)


DEFAULT = EventPartition("run_events_default", True, None, None, False)
BEFORE = EventPartition("run_events_before_20261201", False, None, datetime(2026, 12, 1, tzinfo=UTC), False)


def test_days_ahead_are_made_and_a_gap_left_while_no_reaper_ran_is_filled() -> None:
    today = date(2026, 12, 10)
    assert missing_days([DEFAULT], today, days_ahead=2) == [date(2026, 12, 10), date(2026, 12, 11), date(2026, 12, 12)]
    made = [day(date(2026, 12, n)) for n in (1, 2, 3)]
    assert missing_days([*made, DEFAULT], today, days_ahead=1) == [date(2026, 12, n) for n in range(4, 12)]
    ahead = [day(date(2026, 12, n)) for n in (10, 11, 12)]
    assert missing_days([*ahead, DEFAULT], today, days_ahead=2) == []


def test_runs_below_the_oldest_day_partition_have_no_events_left_in_one() -> None:
    days = [day(date(2026, 12, n)) for n in (3, 4)]
    assert purge_before([BEFORE, *days, DEFAULT]) == datetime(2026, 12, 3, tzinfo=UTC)
    assert purge_before([DEFAULT]) == datetime.max.replace(tzinfo=UTC)  # every day is gone
