"""The run and event types shared by the API and the worker, and the queue's domain errors."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class Status(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.DONE, Status.DEAD, Status.CANCELLED})
TERMINAL_EVENTS = frozenset({"run.completed", "run.cancelled", "run.failed"})


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


class Outcome(Protocol):
    """How the statement that ended an attempt left the run (a :class:`Run` is one)."""

    @property
    def status(self) -> Status: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def cancel_reason(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Completed:
    """A run :meth:`~app.queue.Queue.complete_many` finished. Only what the worker needs is
    read back: decoding every completed run's input and output again costs more than the run."""

    id: uuid.UUID
    last_event_seq: int

    status = Status.DONE
    error_code = None
    cancel_reason = None


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    attempt: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class EventPage:
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
