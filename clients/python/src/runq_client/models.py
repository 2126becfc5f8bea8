"""The API's objects as frozen dataclasses with attribute access (DESIGN: runs, threads, events).

Each class reads its JSON with :meth:`from_json`; fields the server adds later are ignored (and
kept in ``raw``), so an older client keeps working against a newer server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from runq_client.errors import RunqError

TERMINAL_STATUSES = frozenset({"done", "dead", "cancelled"})
TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})

T = TypeVar("T")
M = TypeVar("M", bound="_Model")


def parse_datetime(value: Any) -> datetime | None:
    if value is None:
        return None
    # Python 3.10's fromisoformat knows no "Z" suffix.
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class _Model:
    """Builds a dataclass from JSON: datetimes parsed, nested objects built, unknown keys kept."""

    _datetimes: ClassVar[frozenset[str]] = frozenset()
    _nested: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    @classmethod
    def from_json(cls: type[M], data: Any) -> M:
        if not isinstance(data, Mapping):
            raise RunqError(0, "invalid_response", f"expected a JSON object for {cls.__name__}")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == "raw" or f.name not in data:
                continue
            value = data[f.name]
            if f.name in cls._datetimes:
                value = parse_datetime(value)
            elif f.name in cls._nested and value is not None:
                value = cls._nested[f.name](value)
            values[f.name] = value
        values["raw"] = dict(data)
        try:
            return cls(**values)
        except TypeError as exc:  # a required field is missing
            raise RunqError(0, "invalid_response", f"{cls.__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Waitpoint(_Model):
    """What a ``waiting`` run waits for; resume it with ``runs.resume``."""

    _datetimes: ClassVar[frozenset[str]] = frozenset({"expires_at"})

    waitpoint_id: str
    name: str
    payload: Any = None
    expires_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run(_Model):
    """A run as its tenant sees it."""

    _datetimes: ClassVar[frozenset[str]] = frozenset(
        {"available_at", "created_at", "updated_at", "finished_at", "cancel_requested_at"}
    )
    _nested: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"waitpoint": Waitpoint.from_json}

    id: str
    tenant_id: str
    agent: str
    status: str
    priority: int
    attempts: int
    max_attempts: int
    input: dict[str, Any]
    budget: dict[str, Any]
    output: Any
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    cancel_reason: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    on_disconnect: str = "continue"
    disconnect_grace_s: float = 30.0
    last_event_seq: int = 0
    thread_id: str | None = None
    waitpoint: Waitpoint | None = None
    usage: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """``done``, ``dead`` or ``cancelled``: the run never changes again."""
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class Event(_Model):
    """One event of a run's log; ``seq`` counts from 1 without gaps.

    The stream carries ``seq``, ``type`` and ``data``; the JSON page adds ``attempt`` and
    ``created_at``.
    """

    _datetimes: ClassVar[frozenset[str]] = frozenset({"created_at"})

    seq: int
    type: str
    data: dict[str, Any]
    attempt: int | None = None
    created_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """``run.completed``, ``run.failed`` or ``run.cancelled``: the last of an execution."""
        return self.type in TERMINAL_EVENTS


@dataclass(frozen=True, slots=True, kw_only=True)
class Thread(_Model):
    """A conversation that successive runs read and extend."""

    _datetimes: ClassVar[frozenset[str]] = frozenset({"created_at", "updated_at"})

    id: str
    tenant_id: str
    metadata: dict[str, Any]
    status: str
    created_at: datetime
    updated_at: datetime
    last_run_id: str | None = None
    message_count: int = 0
    chat_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message(_Model):
    """One message of a thread's history (OpenAI chat format plus its place and its run)."""

    _datetimes: ClassVar[frozenset[str]] = frozenset({"created_at"})

    index: int
    role: str
    content: Any
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamToken(_Model):
    """A short-lived token for one run (for a browser): ``read`` its events, and with the
    ``resume`` scope ``POST /runs/{id}/resume?token=…``."""

    _datetimes: ClassVar[frozenset[str]] = frozenset({"expires_at"})

    token: str
    expires_at: datetime
    scopes: list[str] = field(default_factory=lambda: ["read"])
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadToken(_Model):
    """A token for a browser: one thread and its runs, with its scopes (``read``, ``run``,
    ``resume``, ``cancel``), and the agent and input fields its runs are bound to."""

    _datetimes: ClassVar[frozenset[str]] = frozenset({"expires_at"})

    token: str
    expires_at: datetime
    thread_id: str
    scopes: list[str]
    agent: str | None = None
    input: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first; pass ``next_cursor`` back as ``cursor=`` for the next."""

    items: list[T]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    """Stored events after a seq; ``next_after`` is the cursor of the next page (None at the end)."""

    items: list[Event]
    next_after: int | None = None


def page_of(item: Callable[[Any], T]) -> Callable[[Any], Page[T]]:
    """A parser for the list shape ``{"items": [...], "next_cursor": ...}``."""

    def parse(data: Any) -> Page[T]:
        if not isinstance(data, Mapping) or not isinstance(data.get("items"), list):
            raise RunqError(0, "invalid_response", "expected a list page")
        return Page([item(i) for i in data["items"]], data.get("next_cursor"))

    return parse


def event_page(data: Any) -> EventPage:
    if not isinstance(data, Mapping) or not isinstance(data.get("items"), list):
        raise RunqError(0, "invalid_response", "expected a page of events")
    return EventPage([Event.from_json(i) for i in data["items"]], data.get("next_after"))
