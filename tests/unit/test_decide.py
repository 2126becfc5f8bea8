"""Which ending an attempt gets, for every way an agent's call can end and every stop."""

from __future__ import annotations

import pytest

from app.agents.base import BudgetExceeded, DeadlineExceeded, FatalError, RetryableError
from app.domain import Ending, Finish, Wait
from app.errors import DatabaseUnavailable, LeaseLost
from app.worker.decide import AgentEnded, StopReason, decide

RETURNED = AgentEnded(value={"text": "hi"})
CANCELLED = AgentEnded(cancelled=True)
WAIT = Wait(name="approval", occurrence=1, payload={"tool_call_id": "c1"}, timeout_s=60.0)
WAITED = AgentEnded(wait=WAIT)


def raised(error: Exception) -> AgentEnded:
    return AgentEnded(error=error)


CASES: list[tuple[str, AgentEnded, StopReason | None, Finish | None]] = [
    ("returned", RETURNED, None, Finish.done({"text": "hi"})),
    ("returned None", AgentEnded(value=None), None, Finish.done(None)),
    # A value returned before a late stop is still the run's output.
    ("returned, then cancel", RETURNED, "cancel", Finish.done({"text": "hi"})),
    ("returned, then shutdown", RETURNED, "shutdown", Finish.done({"text": "hi"})),
    ("returned, then deadline", RETURNED, "deadline", Finish.done({"text": "hi"})),
    ("returned, then lease lost", RETURNED, "lease_lost", None),
    ("stopped by cancel", CANCELLED, "cancel", Finish.cancelled()),
    ("raised on cancel", raised(RetryableError("stop")), "cancel", Finish.cancelled()),
    ("stopped by shutdown", CANCELLED, "shutdown", Finish.released()),
    ("raised on shutdown", raised(ValueError("x")), "shutdown", Finish.released()),
    ("stopped by deadline", CANCELLED, "deadline", Finish.dead("deadline_exceeded", "late")),
    ("stopped, lease lost", CANCELLED, "lease_lost", None),
    ("stopped by max_tokens", CANCELLED, "budget", Finish.dead("budget_exceeded", "over")),
    ("raised on max_tokens", raised(BudgetExceeded("over")), "budget", Finish.dead("budget_exceeded", "over")),
    ("swallowed max_tokens, then raised", raised(ValueError("x")), "budget", Finish.dead("budget_exceeded", "over")),
    ("returned, then max_tokens", RETURNED, "budget", Finish.done({"text": "hi"})),
    ("raised LeaseLost", raised(LeaseLost("r")), None, None),
    ("raised LeaseLost during a cancel", raised(LeaseLost("r")), "cancel", None),
    ("fatal", raised(FatalError("no")), None, Finish.dead("fatal_error", "no")),
    ("fatal with its own code", raised(FatalError("no", code="bad_input")), None, Finish.dead("bad_input", "no")),
    ("budget", raised(BudgetExceeded("max_turns of 2 used up")), None, Finish.dead("budget_exceeded", "max_turns of 2 used up")),
    ("deadline raised by the agent", raised(DeadlineExceeded("late")), None, Finish.dead("deadline_exceeded", "late")),
    ("retryable", raised(RetryableError("flaky")), None, Finish.retry("retryable_error", "flaky")),
    ("database down", raised(DatabaseUnavailable("gone")), None, Finish.retry("database_unavailable", "gone")),
    ("cancelled without a stop", CANCELLED, None, Finish.retry("internal_error", "the agent's task was cancelled")),
    ("unexpected", raised(KeyError("k")), None, Finish.retry("internal_error", "KeyError: 'k'")),
    # A wait ends the attempt cleanly, as a return does; a cancel, a deadline or max_tokens still wins.
    ("waited", WAITED, None, Finish.waiting(WAIT)),
    ("waited, then shutdown", WAITED, "shutdown", Finish.waiting(WAIT)),
    ("waited, then cancel", WAITED, "cancel", Finish.cancelled()),
    ("waited, then deadline", WAITED, "deadline", Finish.dead("deadline_exceeded", "late")),
    ("waited, then lease lost", WAITED, "lease_lost", None),
    ("swallowed max_tokens, then waited", WAITED, "budget", Finish.dead("budget_exceeded", "over")),
]


@pytest.mark.parametrize(("ended", "stop", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(ended: AgentEnded, stop: StopReason | None, expected: Finish | None) -> None:
    assert decide(ended, stop, deadline_message=lambda: "late", budget_message=lambda: "over") == expected


def test_every_ending_is_reachable() -> None:
    assert {c[3].ending for c in CASES if c[3] is not None} == set(Ending)
