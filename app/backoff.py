"""Doubling waits: between retries of something that is down (the database, a LISTEN
connection), short for a blip, capped for an outage, reset once it works again; and before the
next attempt of a failed run or webhook delivery."""

from __future__ import annotations

import random
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
    """``next()`` gives the wait before the next try and doubles it, up to ``max_s``.

    Each wait is jittered down to half of it, so the processes that lost one database at once
    do not all knock on the new primary in the same instant. The cap is short: after a failover
    runq must be back within seconds of the new primary taking writes, and a try costs a
    refused or a quickly answered connection.
    """

    def __init__(self, *, first_s: float = 0.1, max_s: float = 2.0) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self._base_s = first_s
        self._wait_s = self._jittered(first_s)

    def peek(self) -> float:
        """The wait ``next()`` will give, without taking it."""
        return self._wait_s

    def next(self) -> float:
        wait = self._wait_s
        self._base_s = min(self._base_s * 2, self.max_s)
        self._wait_s = self._jittered(self._base_s)
        return wait

    def reset(self) -> None:
        self._base_s = self.first_s
        self._wait_s = self._jittered(self.first_s)

    @staticmethod
    def _jittered(wait_s: float) -> float:
        return wait_s * random.uniform(0.5, 1.0)
