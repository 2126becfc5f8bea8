"""Schedule timing: validation codes, the latest missed slot, cron across daylight saving."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.cron import ScheduleInvalid, Timing

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("timing", "code"),
    [
        (Timing(cron=None, every_s=None), "invalid_schedule"),
        (Timing(cron="* * * * *", every_s=60), "invalid_schedule"),
        (Timing(cron=None, every_s=0.5), "invalid_interval"),
        (Timing(cron=None, every_s=0), "invalid_interval"),
        (Timing(cron="61 * * * *", every_s=None), "invalid_cron"),
        (Timing(cron="* * * *", every_s=None), "invalid_cron"),
        (Timing(cron="* * * * * *", every_s=None), "invalid_cron"),  # no seconds field
        (Timing(cron="@daily", every_s=None), "invalid_cron"),
        (Timing(cron="0 0 31 2 *", every_s=None), "invalid_cron"),  # never happens
        (Timing(cron="* * * * *", every_s=None, timezone="Mars/Olympus"), "unknown_timezone"),
        (Timing(cron="* * * * *", every_s=None, timezone="../../etc/passwd"), "unknown_timezone"),
        (Timing(cron=None, every_s=5, timezone=""), "unknown_timezone"),
    ],
)
def test_bad_timing_is_refused_with_its_code(timing: Timing, code: str) -> None:
    with pytest.raises(ScheduleInvalid) as refused:
        timing.check()
    assert refused.value.code == code


def test_interval_after_downtime_runs_only_the_latest_missed_slot() -> None:
    timing = Timing(cron=None, every_s=60).check()
    first = timing.first_after(T0)
    assert first == T0 + timedelta(seconds=60)
    # five slots passed while nobody fired: one slot, the latest; the next one after now
    now = first + timedelta(seconds=4 * 60 + 30)
    assert timing.latest_due(now, next_run_at=first) == (first + timedelta(minutes=4), first + timedelta(minutes=5))


def test_interval_resumes_on_its_grid() -> None:
    timing = Timing(cron=None, every_s=10)
    assert timing.first_after(T0 + timedelta(seconds=25), anchor=T0) == T0 + timedelta(seconds=30)
    assert timing.first_after(T0 - timedelta(seconds=5), anchor=T0) == T0


def test_cron_latest_due_and_next() -> None:
    timing = Timing(cron="*/15 * * * *", every_s=None).check()
    now = T0 + timedelta(minutes=50, seconds=3)
    slot, nxt = timing.latest_due(now, next_run_at=T0 + timedelta(minutes=15))
    assert (slot, nxt) == (T0 + timedelta(minutes=45), T0 + timedelta(minutes=60))
    exactly = T0 + timedelta(minutes=45)
    assert timing.latest_due(exactly, next_run_at=exactly)[0] == exactly  # a slot is due at its instant


def test_cron_is_read_in_its_zone_across_daylight_saving() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    timing = Timing(cron="30 2 * * *", every_s=None, timezone="Europe/Berlin").check()
    # 2026-03-29 02:30 does not exist in Berlin: cron runs it at 03:00 (01:00 UTC)
    first = timing.first_after(datetime(2026, 3, 28, 12, tzinfo=berlin))
    assert first.astimezone(UTC) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert timing.first_after(first).astimezone(UTC) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    nine = Timing(cron="0 9 * * *", every_s=None, timezone="America/New_York").first_after(T0)
    assert nine.astimezone(UTC) == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
