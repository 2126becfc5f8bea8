"""The run and event types shared by the API and the worker (their errors: app/errors.py)."""

from __future__ import annotations

import importlib.metadata
import os
import secrets
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from operator import itemgetter
from typing import Any, NamedTuple


class Status(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    WAITING = "waiting"  # for input (docs/waits.md): no lease, no slot, until resumed
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.DONE, Status.DEAD, Status.CANCELLED})


class Usage(NamedTuple):
    """What a run consumed, over all its attempts (docs/usage.md)."""

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> Usage:
        """From the stored object; a key it lacks is 0 (runs from before usage was counted)."""
        if not stored:
            return NO_USAGE  # a run that has consumed nothing yet: most claims
        return cls(*(int(stored.get(name) or 0) for name in cls._fields))

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self, other, strict=True)))

    def minus(self, other: Usage) -> Usage:
        return Usage(*(a - b for a, b in zip(self, other, strict=True)))

    def as_dict(self) -> dict[str, int]:
        return self._asdict()


NO_USAGE = Usage()


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
    thread_id: uuid.UUID | None = None
    usage: Usage = NO_USAGE
    traceparent: str | None = None  # W3C trace context of the request that created the run
    waitpoint: dict[str, Any] | None = None  # the open waitpoint while waiting
    wait_count: int = 0  # claims that ended in a wait; they do not count toward max_attempts

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_row(cls, row: Any) -> Run:
        """The run from a row of ``agent_runs`` (the statements return ``agent_runs.*``)."""
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, mapping: Mapping[Any, Any]) -> Run:
        """:meth:`from_row` for a row's mapping already at hand (each ``row._mapping`` is a new
        object): the one place the columns map onto the type, so they are written out only here."""
        values = list(_RUN_COLUMNS(mapping))  # one C call: every claim maps a row
        values[_RUN_STATUS] = Status(values[_RUN_STATUS])
        values[_RUN_USAGE] = Usage.of(values[_RUN_USAGE])
        return cls(*values)


# The table stores input and budget as input_json and budget_json; every other field is the
# column of the same name.
_RUN_NAMES = [{"input": "input_json", "budget": "budget_json"}.get(f.name, f.name) for f in fields(Run)]
_RUN_COLUMNS = itemgetter(*_RUN_NAMES)
_RUN_STATUS = _RUN_NAMES.index("status")
_RUN_USAGE = _RUN_NAMES.index("usage")


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
    """A recurring run: a cron expression (in ``timezone``) or a fixed interval ``every_s``.
    The fields stand in the order the API shows them (``ScheduleOut`` is built from them)."""

    id: uuid.UUID
    tenant_id: str
    cron: str | None
    every_s: float | None
    timezone: str
    next_run_at: datetime
    ends_at: datetime | None  # no slot after it fires
    paused: bool
    last_run_id: uuid.UUID | None
    # why the reaper could not fire it (it tries again a minute later), and when; None once it fires
    error: str | None
    error_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # the run each slot creates
    agent: str
    input: dict[str, Any]
    budget: dict[str, Any]
    priority: int
    max_attempts: int
    thread_id: uuid.UUID | None
    webhook: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Thread:
    """A conversation: its runs execute one at a time in creation order and extend its history.
    ``busy`` while one of its runs is not terminal."""

    id: uuid.UUID
    tenant_id: str
    metadata: dict[str, Any]
    busy: bool
    message_count: int
    last_run_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    chat_id: str | None = None  # a chat frontend's own name for it (docs/threads.md)


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """One message of a thread's history, in OpenAI chat format, and the run that added it."""

    index: int
    message: dict[str, Any]  # {role, content, tool_calls?, tool_call_id?}
    run_id: uuid.UUID | None
    created_at: datetime


class Strategy(StrEnum):
    """What a new run of a busy thread does to the runs in flight (double-texting)."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"

    @property
    def ends_runs(self) -> bool:
        """Whether it ends the runs in flight (a thread token needs ``cancel`` for that)."""
        return self in (Strategy.INTERRUPT, Strategy.ROLLBACK)


@dataclass(frozen=True, slots=True)
class Claim:
    """A run a worker holds: every write it makes is fenced by ``lease_id``."""

    run: Run
    lease_id: uuid.UUID
    resume_state: Any


class ClaimBatch(list[Claim]):
    """The runs one claim leased; ``more``: more runnable runs were left besides them than the
    other workers' free slots, so a slot that frees should claim again rather than wait for a
    wake-up; ``unclaimed``: some were left, which those slots were woken for, so a freed slot
    should look again within a poll in case a wake-up went astray; ``lost``: fewer than asked
    for, because a concurrent claim held runs this one saw, so look again at once."""

    more: bool = False
    unclaimed: bool = False
    lost: bool = False


class Ending(StrEnum):
    """How the worker ends an attempt. The status it leads to is the database's to say: a
    retry without attempts left is ``dead``, a retry or release of a run with a cancel request
    is ``cancelled``."""

    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    RELEASED = "released"
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class Wait:
    """A wait the agent asked for (``ctx.wait_for``): the n-th wait named ``name`` in the run's
    code, and the checkpoint stored with it, from which the resumed attempt starts."""

    name: str
    occurrence: int
    payload: Any = None
    timeout_s: float | None = None
    waitpoint_id: uuid.UUID = field(default_factory=uuid.uuid4)
    checkpoint: Any = None


@dataclass(frozen=True, slots=True)
class Finish:
    """The ending an attempt gets and what it stores (see ``app.worker.decide``)."""

    ending: Ending
    output: Any = None
    error_code: str | None = None
    error_message: str | None = None
    wait: Wait | None = None

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

    @classmethod
    def waiting(cls, wait: Wait) -> Finish:
        return cls(Ending.WAITING, wait=wait)


class Finished(NamedTuple):
    """How the statement that ended an attempt left the run. Not its input or budget: decoding
    them again for every finished run costs more than a no-op run (and a tuple, built for
    every run that ends, costs less than a frozen dataclass)."""

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
        values = list(_FINISHED_COLUMNS(row._mapping))
        values[_FINISHED_STATUS] = Status(values[_FINISHED_STATUS])
        return cls(*values)


_FINISHED_NAMES = list(Finished._fields)
_FINISHED_COLUMNS = itemgetter(*_FINISHED_NAMES)
_FINISHED_STATUS = _FINISHED_NAMES.index("status")


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
    idle_workers: int = 1  # registered workers with a free slot, this one included once it has


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker process as its heartbeat registers it, so operators see it even while idle."""

    worker_id: str  # ``host:pid:boot_id``, the runs' ``locked_by``
    host: str
    pid: int
    version: str  # runq's package version
    slots: int  # --concurrency

    @classmethod
    def start(cls, *, slots: int) -> WorkerInfo:
        """This process, with a new boot id: it tells a restarted process from its predecessor
        (a pid can be reused)."""
        host, pid = socket.gethostname(), os.getpid()
        return cls(
            worker_id=f"{host}:{pid}:{secrets.token_hex(4)}",
            host=host,
            pid=pid,
            version=importlib.metadata.version("runq"),
            slots=slots,
        )
