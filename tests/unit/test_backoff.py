"""The back-off between retries of something that is down: doubling, jittered, capped at 2 s."""

from __future__ import annotations

from app.backoff import Backoff


def test_waits_double_within_half_to_whole_of_each_step_up_to_the_cap() -> None:
    backoff = Backoff(first_s=0.1, max_s=2.0)
    steps = [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    for step in steps:
        assert step / 2 <= backoff.peek() <= step
        assert backoff.peek() == backoff.next()


def test_processes_that_lost_the_database_together_do_not_retry_in_step() -> None:
    waits = {round(Backoff().next(), 6) for _ in range(50)}
    assert len(waits) > 40


def test_reset_starts_over() -> None:
    backoff = Backoff(first_s=0.1, max_s=2.0)
    for _ in range(6):
        backoff.next()
    backoff.reset()
    assert backoff.next() <= 0.1

