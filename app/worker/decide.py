"""Which ending an attempt gets: a pure function of how the agent's call ended and of what,
if anything, stopped the run early. The runner writes whatever it says, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.agents.base import AgentError, BudgetExceeded, DeadlineExceeded, FatalError
from app.domain import Finish, Wait
from app.errors import DatabaseUnavailable, InvalidData, LeaseLost

StopReason = Literal["cancel", "lease_lost", "shutdown", "deadline", "budget", "invalid_data", "write_failed"]


@dataclass(frozen=True, slots=True)
class AgentEnded:
    """How the agent's call ended: its return value, its exception, a wait, or cancelled."""

    value: Any = None
    error: Exception | None = None
    cancelled: bool = False
    wait: Wait | None = None

    @property
    def returned(self) -> bool:
        return not self.cancelled and self.error is None and self.wait is None


def decide(
    ended: AgentEnded,
    stop: StopReason | None,
    *,
    deadline_message: Callable[[], str],
    budget_message: Callable[[], str],
    failure: str | None = None,
) -> Finish | None:
    """The ending of this attempt, or ``None`` when its lease is lost: the claim belongs to
    someone else now, and this worker writes nothing more for it.

    A stop wins over how the agent ended only if the agent did not return: a value returned
    before a late cancel is still the run's output. A wait is a clean end like a return,
    except that a cancel, a deadline or a passed ``max_tokens`` still wins over it. A lost lease wins over everything;
    then a write of the run that failed (``failure`` says why), whatever the agent did after
    it: a value that could not be stored ends it dead (``invalid_data``, retrying would fail
    again), another failed write ends the attempt (its events are gone, so it is retried).
    The messages are asked for only when the run ends on that stop (formatting them for every
    run costs more than a microsecond).
    """
    error = ended.error
    if stop == "lease_lost" or isinstance(error, LeaseLost):
        return None
    if stop == "invalid_data" or isinstance(error, InvalidData):
        return Finish.dead(InvalidData.code, failure or str(error))
    if stop == "write_failed":
        return Finish.retry("write_failed", failure or "a write of the run failed")
    if ended.wait is not None and stop not in ("cancel", "deadline", "budget"):
        return Finish.waiting(ended.wait)
    if not ended.returned:
        match stop:
            case "cancel":
                return Finish.cancelled()
            case "shutdown":
                return Finish.released()
            case "deadline":
                return Finish.dead(DeadlineExceeded.code, deadline_message())
            case "budget":  # max_tokens passed: also when the agent swallowed BudgetExceeded
                return Finish.dead(BudgetExceeded.code, budget_message())
    match error:
        case None if ended.returned:
            return Finish.done(ended.value)
        case None:  # cancelled from outside without a stop of this run
            return Finish.retry("internal_error", "the agent's task was cancelled")
        case FatalError():
            return Finish.dead(error.code, str(error))
        case AgentError():
            return Finish.retry(error.code, str(error))
        case DatabaseUnavailable():
            return Finish.retry("database_unavailable", str(error))
        case _:
            return Finish.retry("internal_error", f"{type(error).__name__}: {error}")
