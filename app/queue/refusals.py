"""A tenant's refusals, remembered for as long as it was told to wait (docs/limits.md).

A client that ignores ``Retry-After`` and tries again at once would cost the database a
statement per try, on the cores every other tenant shares. Within the wait it was given (at
most ``MEMO_S``, so an operator's raised limit applies within a second), this process answers
the same refusal itself. Each API process asks the database once per wait: the limits stay
cluster-wide, the memo only spares repeats.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.errors import LimitExceeded

MEMO_S = 1.0
# Past this many remembered tenants, the expired ones are dropped.
PRUNE_AT = 10_000


class Refusals:
    """The latest refusal of each (tenant, kind): ``create`` (rate, pending) or ``stream``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[str, str], tuple[float, LimitExceeded]] = {}

    def __len__(self) -> int:
        return len(self._until)

    def check(self, tenant_id: str, kind: str) -> None:
        """Raise the remembered refusal, its ``retry_after_s`` what is left of the wait."""
        key = (tenant_id, kind)
        if (memo := self._until.get(key)) is None:
            return
        until, refused = memo
        left = until - self._clock()
        if left <= 0:
            del self._until[key]
            return
        raise LimitExceeded(
            tenant_id=tenant_id, limit=refused.limit, quota=refused.quota, retry_after_s=left,
            window_s=refused.window_s,
        )  # fmt: skip

    def remember(self, kind: str, refused: LimitExceeded) -> LimitExceeded:
        """Keep ``refused`` for its wait; returned, to be raised."""
        now = self._clock()
        if len(self._until) >= PRUNE_AT:
            self._until = {key: memo for key, memo in self._until.items() if memo[0] > now}
        self._until[(refused.tenant_id, kind)] = (now + min(refused.retry_after_s, MEMO_S), refused)
        return refused
