"""Waits (docs/waits.md): the recorded value of a run's waits, and resuming a waiting run by a
value (the API) or by its time-out (the reaper). The wait itself is an ending of
:mod:`app.queue.finish`, written with the attempt's checkpoint in one fenced statement."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.domain import Run
from app.errors import NotWaiting, RunNotFound
from app.queue.claims import BOUND_IDLE_TRANSACTION
from app.queue.codec import dumps
from app.queue.maintenance import REAPER_LOCK
from app.queue.rowwise import without_failing_rows
from app.queue.runs import GET_RUN
from app.queue.statements import statement
from app.queue.store import Store

FIND_WAITPOINT = statement("find_waitpoint")
RESUME_WAITS = statement("resume_waits")
DUE_WAITPOINTS = statement("due_waitpoints")


@dataclass(frozen=True, slots=True)
class Recorded:
    """A wait that was resumed: the value it was given, or its time-out."""

    value: Any
    timed_out: bool


@dataclass(frozen=True, slots=True)
class Resumed:
    """A run a resume made pending, and how long it had waited."""

    run: Run
    waitpoint_id: uuid.UUID
    waited_s: float


class Waits(Store):
    async def find_waitpoint(self, *, run_id: uuid.UUID, name: str, occurrence: int) -> Recorded | None:
        """The resumed wait at ``(run, name, occurrence)``, or ``None`` if it must wait (again)."""
        params = {"run_id": run_id, "name": name, "occurrence": occurrence}
        async with self._statement() as conn:
            row = (await conn.execute(FIND_WAITPOINT, params)).first()
        return None if row is None else Recorded(row.value, bool(row.timed_out))

    async def resume(
        self, run_id: uuid.UUID, *, tenant_id: str | None, value: Any, waitpoint_id: uuid.UUID | None = None
    ) -> Resumed:
        """A waiting run back to pending with ``value`` for its open wait (``waitpoint_id``, if
        given, must name it); :class:`NotWaiting` otherwise, :class:`RunNotFound` for no such run."""
        params = self._resume_params([(run_id, waitpoint_id)], value=dumps(value), timed_out=False)
        async with self._tx() as conn:
            row = (await conn.execute(RESUME_WAITS, {**params, "tenant_id": tenant_id})).first()
            if row is None:
                found = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise NotWaiting(str(run_id)) if found is not None else RunNotFound(str(run_id))
        return _resumed(row)

    async def resume_expired_waits(self, *, batch: int = 500) -> list[Resumed]:
        """Waits past their ``expires_at`` resumed as timed out; one reaper at a time cluster-wide."""
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            due = [(r.run_id, r.waitpoint_id) for r in await conn.execute(DUE_WAITPOINTS, {"batch": batch})]

            async def resume(waits: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> Sequence[Any]:
                params = self._resume_params(waits, value=None, timed_out=True)
                return (await conn.execute(RESUME_WAITS, {**params, "tenant_id": None})).all()

            rows = await without_failing_rows(conn, due, resume, step="wait_timeouts")
        return [_resumed(r) for r in rows]

    def _resume_params(
        self, waits: Sequence[tuple[uuid.UUID, uuid.UUID | None]], *, value: str | None, timed_out: bool
    ) -> dict[str, Any]:
        return {
            "run_ids": [w[0] for w in waits],
            "waitpoint_ids": [w[1] for w in waits],
            "wait_values": [value] * len(waits),
            "timed_out": [timed_out] * len(waits),
            "aging_s": self.aging_s,
        }


def _resumed(row: Any) -> Resumed:
    return Resumed(Run.from_row(row), row.resumed_waitpoint_id, float(row.waited_s))
