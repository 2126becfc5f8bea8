"""The run and event types shared by the API and the worker, and the queue's domain errors."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.DONE, Status.DEAD, Status.CANCELLED})


@dataclass(frozen=True, slots=True)
class Run:
    id: uuid.UUID
    tenant_id: str
    agent: str
    status: Status
    priority: int
    attempts: int
    max_attempts: int
    input: dict[str, Any]
    budget: dict[str, Any]
    output: Any
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_reason: str | None
    error_code: str | None
    error_message: str | None
    on_disconnect: str
    disconnect_grace_s: float
    last_event_seq: int
    locked_by: str | None
    locked_until: datetime | None
    schedule_id: uuid.UUID | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_row(cls, row: Any) -> Run:
        """The run from a row of ``agent_runs`` (the statements return ``agent_runs.*``): the
        one place its columns map onto the type, so they are written out only here."""
        m = row._mapping
        values = {name: m[name] for name in _RUN_FIELDS}
        values["status"] = Status(values["status"])
        values["input"], values["budget"] = _json(m["input_json"]), _json(m["budget_json"])
        values["output"] = _json(values["output"])
        return cls(**values)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


_RUN_FIELDS = [f.name for f in fields(Run) if f.name not in ("input", "budget")]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One webhook delivery of the outbox: the run's event it announces and how sending went.
    ``id`` is the ``webhook-id`` header, the same on every attempt."""

    id: uuid.UUID
    run_id: uuid.UUID
    tenant_id: str
    url: str
    event_seq: int
    event_type: str
    status: str  # pending | delivered | failed | stopped
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring run: a cron expression (in ``timezone``) or a fixed interval ``every_s``."""

    id: uuid.UUID
    tenant_id: str
    cron: str | None
    every_s: float | None
    timezone: str
    agent: str
    input: dict[str, Any]
    budget: dict[str, Any]
    priority: int
    max_attempts: int
    thread_id: uuid.UUID | None
    webhook: dict[str, Any] | None
    paused: bool
    next_run_at: datetime
    last_run_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    """A run a worker holds: every write it makes is fenced by ``lease_id``."""

    run: Run
    lease_id: uuid.UUID
    resume_state: Any


class Ending(StrEnum):
    """How the worker ends an attempt. The status it leads to is the database's to say: a
    retry without attempts left is ``dead``, a retry or release of a run with a cancel request
    is ``cancelled``."""

    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class Finish:
    """The ending an attempt gets and what it stores (see ``app.worker.decide``)."""

    ending: Ending
    output: Any = None
    error_code: str | None = None
    error_message: str | None = None

    @classmethod
    def done(cls, output: Any) -> Finish:
        return cls(Ending.DONE, output=output)

    @classmethod
    def retry(cls, error_code: str, error_message: str) -> Finish:
        return cls(Ending.RETRY, error_code=error_code, error_message=error_message)

    @classmethod
    def dead(cls, error_code: str, error_message: str) -> Finish:
        return cls(Ending.DEAD, error_code=error_code, error_message=error_message)

    @classmethod
    def cancelled(cls) -> Finish:
        return cls(Ending.CANCELLED)

    @classmethod
    def released(cls) -> Finish:
        return cls(Ending.RELEASED, error_code="worker_shutdown")


@dataclass(frozen=True, slots=True)
class Finished:
    """How the statement that ended an attempt left the run. Not its input or budget: decoding
    them again for every finished run costs more than a no-op run."""

    id: uuid.UUID
    status: Status
    attempts: int
    output: Any
    available_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    locked_by: str | None
    locked_until: datetime | None
    error_code: str | None
    error_message: str | None
    cancel_reason: str | None
    last_event_seq: int

    @classmethod
    def from_row(cls, row: Any) -> Finished:
        m = row._mapping
        values = {name: m[name] for name in _FINISHED_FIELDS}
        values["status"], values["output"] = Status(values["status"]), _json(values["output"])
        return cls(**values)


_FINISHED_FIELDS = [f.name for f in fields(Finished)]


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    attempt: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class EventSlice:
    """One run's events after a cursor, with its status and last seq read in the same snapshot,
    so a follower knows without another read whether anything can still come."""

    status: Status
    last_event_seq: int
    events: list[tuple[int, str, str]]  # (seq, type, data as JSON text), in seq order


@dataclass(frozen=True, slots=True)
class LeaseCheck:
    """What one heartbeat learned about the runs a worker holds."""

    lost: frozenset[uuid.UUID]
    cancel_requested: frozenset[uuid.UUID]


class QueueError(Exception):
    """Base of the queue's domain errors."""


class RunNotFound(QueueError):
    """No such run for this tenant."""


class RunFinished(QueueError):
    """The run is terminal; it cannot change any more."""


class LeaseLost(QueueError):
    """The claim's lease is gone: the worker must stop the run and write nothing more."""


class IdempotencyConflict(QueueError):
    """The idempotency key was used before with a different request body."""


class NotRequeueable(QueueError):
    """Only dead or cancelled runs can be requeued."""


class DatabaseUnavailable(QueueError):
    """PostgreSQL cannot be reached right now; retry later."""


class DeliveryNotFound(QueueError):
    """No such webhook delivery (for this tenant)."""


class NotRedeliverable(QueueError):
    """The delivery is still pending: it is being sent or will be, so it cannot be sent again."""


class ScheduleNotFound(QueueError):
    """No such schedule for this tenant."""
