"""Doubling waits: between retries of something that is down (the database, a LISTEN
connection), short for a blip, capped for an outage, reset once it works again; and before the
next attempt of a failed run or webhook delivery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """How long a failed run (the ending statement computes it) or webhook delivery waits
    before its next attempt: ``base_s`` doubled per attempt, capped at ``max_s``
    (``RUNQ_RETRY_BASE_S`` / ``RUNQ_RETRY_MAX_S``)."""

    base_s: float = 5.0
    max_s: float = 300.0

    def delay(self, attempt: int) -> float:
        """The wait after the ``attempt``-th failure (from 1)."""
        return min(self.max_s, self.base_s * 2 ** (attempt - 1))


class Backoff:
    """``next()`` gives the wait before the next try and doubles it, up to ``max_s``."""

    def __init__(self, *, first_s: float = 0.1, max_s: float = 5.0) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self._wait_s = first_s

    def peek(self) -> float:
        """The wait ``next()`` will give, without taking it."""
        return self._wait_s

    def next(self) -> float:
        wait, self._wait_s = self._wait_s, min(self._wait_s * 2, self.max_s)
        return wait

    def reset(self) -> None:
        self._wait_s = self.first_s
