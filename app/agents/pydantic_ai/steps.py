"""A PydanticAI run's durable steps: each one's record by its position in the run.

A step (a model response, a tool result, an approval's decision) is recorded in the run's
effect ledger (``ctx.effect``, fenced by the lease) under a key made of its position: the
number of the model request it belongs to and, for a tool, the tool call's id, which comes
from that recorded response. Never a hash of its input: two runs, or two equal requests of one
run, never share a record (pydantic/pydantic-ai#6903).

What a live step also did — its events, its usage (the budget counters are counted from it),
its thread messages — goes to the database in the same commit as its record (``ctx.effect``
sends them together, at once): a crash before that commit runs the step again, a crash after it
replays the step, and it is never counted or shown twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.agents.base import FatalError, RunContext

Record = dict[str, Any]
KEY_PREFIX = "pydantic-ai"


class ReplayMismatch(FatalError):
    """A retried attempt asked for a step that differs from the recorded one at its position:
    the agent's code, prompt or tools changed between attempts."""

    code = "replay_mismatch"


class Steps:
    """The records of one attempt: replayed from the ledger, or run live and recorded."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    async def run(self, key: str, live: Callable[[], Awaitable[Record]]) -> Record:
        """The step's record: the one an attempt recorded, or what ``live`` returns (run only
        when no attempt recorded the step)."""
        return await self._ctx.effect(f"{KEY_PREFIX}:{key}", live)
