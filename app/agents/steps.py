"""A framework agent's durable steps: each one's record by its position in the run.

A step (a model response, a tool result, an approval's decision) is recorded in the run's
effect ledger (``ctx.effect``, fenced by the lease) under a key made of the adapter's prefix and
the step's position: the number of the model request it belongs to and, for a tool, the tool
call's id, which comes from that recorded response. Never a hash of its input: two runs, or two
equal requests of one run, never share a record (pydantic/pydantic-ai#6903).

What a live step also did — its events, its usage, its thread messages, the budget counters —
goes to the database with the run's checkpoint, and the record itself rides in that same
checkpoint before it reaches the ledger: a crash between the two leaves the record in the
checkpoint, so the retried attempt replays the step and neither counts nor shows it twice. The
checkpoint keeps only records the ledger does not hold yet (one, or one per parallel tool), and
whatever else the adapter carries from attempt to attempt (``carry``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app.agents.base import FatalError, RunContext

Record = dict[str, Any]


class ReplayMismatch(FatalError):
    """A retried attempt asked for a step that differs from the recorded one at its position:
    the agent's code, prompt or tools changed between attempts."""

    code = "replay_mismatch"


class Steps:
    """The records of one attempt: replayed from the ledger, or run live and recorded.

    ``prefix`` names the adapter in the ledger's keys (pinned: records of runs in flight are
    found by them); ``carry`` adds the adapter's own fields to every checkpoint, handed back
    in :attr:`saved` to the next attempt.
    """

    def __init__(
        self, ctx: RunContext, *, prefix: str, carry: Callable[[], Mapping[str, Any]] | None = None
    ) -> None:
        self._ctx = ctx
        self._prefix = prefix
        self._carry = carry
        self.saved: dict[str, Any] = ctx.resume_state if isinstance(ctx.resume_state, dict) else {}
        # recorded with a checkpoint, perhaps not yet in the ledger
        self._unconfirmed: dict[str, Record] = dict(self.saved.get("steps") or {})

    async def run(self, key: str, live: Callable[[], Awaitable[Record]]) -> Record:
        """The step's record: the one an attempt recorded, or what ``live`` returns (run only
        when no attempt recorded the step)."""
        full_key = f"{self._prefix}:{key}"

        async def record_live() -> Record:
            record = await live()
            self._unconfirmed[full_key] = record
            await self.checkpoint()
            return record

        checkpointed = self._unconfirmed.get(full_key)
        record = await self._ctx.effect(full_key, record_live if checkpointed is None else _returning(checkpointed))
        self._unconfirmed.pop(full_key, None)  # in the ledger now: later checkpoints leave it out
        return record

    async def checkpoint(self) -> None:
        """Store the records the ledger may not hold yet, with what the adapter carries."""
        carried = dict(self._carry()) if self._carry is not None else {}
        await self._ctx.checkpoint({"steps": dict(self._unconfirmed), **carried})


def _returning(record: Record) -> Callable[[], Awaitable[Record]]:
    async def recorded() -> Record:
        return record

    return recorded
