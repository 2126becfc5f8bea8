"""A run's usage as one attempt sees it: what earlier writes stored, and what this attempt has
consumed since its last stored write.

The unstored part rides the next checkpoint or the ending (docs/usage.md). An attempt that is
lost before either takes it along: the attempt that redoes that work counts it, once. The budget
(``max_tokens``) is checked against the whole: stored plus unstored.
"""

from __future__ import annotations

from app.domain import Usage
from app.metrics import count_usage


class UsageMeter:
    def __init__(self, stored: Usage, *, tenant_id: str, max_tokens: int | None) -> None:
        self.stored = stored
        self.unstored = Usage()
        self._tenant_id = tenant_id
        self._max_tokens = max_tokens

    @property
    def total(self) -> Usage:
        return self.stored.plus(self.unstored)

    def add(self, delta: Usage) -> None:
        self.unstored = self.unstored.plus(delta)

    @property
    def over_budget(self) -> bool:
        """The run's tokens passed ``budget.max_tokens``."""
        return self._max_tokens is not None and self.total.tokens > self._max_tokens

    @property
    def budget_message(self) -> str:
        return f"max_tokens of {self._max_tokens} passed ({self.total.tokens} tokens used)"

    def written(self, delta: Usage) -> None:
        """``delta``, a snapshot of :attr:`unstored` taken for a statement, is stored now (usage
        added meanwhile stays unstored); counted in the metrics here, where it was written."""
        if not any(delta):  # most writes: a checkpoint or an ending of a run that used nothing new
            return
        self.unstored = self.unstored.minus(delta)
        self.stored = self.stored.plus(delta)
        count_usage(self._tenant_id, delta)
