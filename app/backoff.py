"""Doubling waits between retries of something that is down (the database, a LISTEN
connection): short for a blip, capped for an outage, reset once it works again."""

from __future__ import annotations


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
