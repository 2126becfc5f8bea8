"""A run's usage as one attempt sees it: what earlier writes stored, and what this attempt has
consumed since its last stored write; and the budgets, counted from it.

The unstored part rides the next checkpoint, effect record (a durable step) or the ending
(docs/usage.md). An attempt that is lost before either takes it along: the attempt that redoes
that work counts it, once. The budgets are checked against the whole, stored plus unstored, so
they bound the run, not the attempt: ``max_tokens`` the tokens, ``max_tool_calls`` the tool
calls, ``max_turns`` the model turns (those of earlier attempts are the model calls they stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.agents.base import BudgetExceeded
from app.domain import Usage
from app.metrics import count_usage

MAX_COUNT = 1 << 53  # the largest figure of usage an agent may report (exact in JSON's numbers)


class UsageMeter:
    def __init__(self, stored: Usage, *, tenant_id: str, budget: Mapping[str, Any]) -> None:
        self.stored = stored
        self.unstored = Usage()
        self._tenant_id = tenant_id
        self._budget = budget
        max_tokens = budget.get("max_tokens")
        self._max_tokens = None if max_tokens is None else int(max_tokens)
        self.turns = stored.model_calls  # model turns begun over the run

    def count_turn(self) -> None:
        """A model turn begins; :class:`BudgetExceeded` past ``max_turns``."""
        self.turns = max(self.turns, self.total.model_calls) + 1
        self._check("max_turns", self.turns)

    def count_tool_call(self) -> None:
        """A tool call, also the run's ``usage.tool_calls``; :class:`BudgetExceeded` past
        ``max_tool_calls``."""
        self.add(Usage(tool_calls=1))
        self._check("max_tool_calls", self.total.tool_calls)

    def record(self, delta: Usage) -> None:
        """What an agent reports it consumed: whole numbers from 0 to 2**53, or ValueError (a
        figure PostgreSQL would refuse to add up must not reach a statement)."""
        if not all(isinstance(n, int) and 0 <= n < MAX_COUNT for n in delta):
            raise ValueError(f"usage figures must be whole numbers from 0 to 2**53: {delta}")
        self.add(delta)

    def _check(self, name: str, used: int) -> None:
        limit = self._budget.get(name)
        if limit is not None and used > int(limit):
            raise BudgetExceeded(f"{name} of {limit} used up")

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
