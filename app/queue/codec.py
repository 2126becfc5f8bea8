"""Values into and out of the queue's statements: JSON PostgreSQL can store, rows as events, list pages.

Values go in as JSON text (:func:`dumps`) and come out decoded: the driver decodes jsonb, so a
jsonb column is read as it is (decoding it again would turn the string ``"123"`` into 123).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from app.domain import Delivery, Event, Schedule, Thread, ThreadMessage, Usage

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

NewEvents = Sequence[tuple[str, Mapping[str, Any]]]
NewMessages = Sequence[Mapping[str, Any]]  # thread messages in OpenAI chat format
T = TypeVar("T", bound="DataclassInstance")

# PostgreSQL's jsonb and text refuse NUL and unpaired surrogates, and a model or a tool can hand
# an agent either (half of a pair split across two streamed chunks): stored as U+FFFD instead,
# as the shell tool does for NUL, rather than failing every attempt of the run (and, since a
# worker writes the events of all its runs in one statement, the other runs' events with it).
# NaN and the infinities, which jsonb refuses too, are stored as null.
_UNSTORABLE_IN_JSON = re.compile("\x00|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
_UNSTORABLE_IN_TEXT = re.compile("[\x00\ud800-\udfff]")  # the driver encodes no surrogate at all


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE_IN_JSON.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def storable_text(value: str) -> str:
    return _UNSTORABLE_IN_TEXT.sub("\ufffd", value)


# Dates and dataclasses go to ``default`` (str), as json.dumps takes them: orjson's own forms differ.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value: Any) -> str:
    """JSON text jsonb takes. orjson writes most values in a tenth of json's time (an event's
    data, a run's output: microseconds of every run); it writes NaN and the infinities as null,
    as :func:`_storable` does, and refuses what json takes otherwise (integers past 64 bits,
    keys that are not strings, unpaired surrogates), which json then writes."""
    try:
        text = orjson.dumps(value, default=str, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _json_dumps(value)
    return _json_dumps(value) if "\\u0000" in text else text


def _json_dumps(value: Any) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:  # NaN or an infinity, which JSON lacks: jsonb would refuse the statement
        return json.dumps(_storable(value), separators=(",", ":"), default=str, allow_nan=False)
    # Both come out as escapes (ensure_ascii): walk the value only when one may be there.
    if "\\u0000" in text or "\\ud" in text:
        text = json.dumps(_storable(value), separators=(",", ":"), default=str)
    return text


def events_params(events: NewEvents) -> dict[str, list[str]]:
    """``:types`` and ``:datas``, the two arrays a statement unnests into a run's new events."""
    return {"types": [storable_text(t) for t, _ in events], "datas": [dumps(d) for _, d in events]}


def messages_params(messages: Sequence[tuple[Any, NewMessages]]) -> dict[str, list[Any]]:
    """``:message_run_ids`` and ``:messages`` for the fenced statements, from ``(run_id, messages)``."""
    return {
        "message_run_ids": [run_id for run_id, batch in messages for _ in batch],
        "messages": [dumps(m) for _, batch in messages for m in batch],
    }


class _WithUsage(Protocol):
    @property
    def run_id(self) -> uuid.UUID: ...
    @property
    def usage(self) -> Usage | None: ...


def usage_params(items: Sequence[_WithUsage]) -> dict[str, list[Any]]:
    """``:usage_run_ids`` and ``:usages``, the deltas a statement adds to runs' usage (only the
    runs that consumed something: the others' usage and tenant hours are left untouched)."""
    used = [(item.run_id, item.usage) for item in items if item.usage is not None and any(item.usage)]
    return {"usage_run_ids": [run_id for run_id, _ in used], "usages": [dumps(u.as_dict()) for _, u in used]}


# Before every row: the first page of a newest-first list.
_BEFORE_ALL = (datetime.max.replace(tzinfo=UTC), uuid.UUID(int=(1 << 128) - 1))


def page_params(before: tuple[datetime, uuid.UUID] | None, limit: int) -> dict[str, Any]:
    """``:before_at``, ``:before_id`` and ``:limit`` of a newest-first list page (runs, threads,
    schedules, deliveries); ``before`` is the keyset cursor ``(created_at, id)`` of the last row
    seen, ``None`` for the first page."""
    before_at, before_id = before or _BEFORE_ALL
    return {"before_at": before_at, "before_id": before_id, "limit": limit}


def request_hash(body: Mapping[str, Any]) -> str:
    """Stable digest of a create request, to tell an idempotent repeat from a conflicting one."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def event_from_row(row: Any, *, prefix: str = "") -> Event:
    """An event from a row of ``run_events``, or from a row that carries one beside another
    table's columns as ``event_seq``, ``event_type``, ... (``prefix="event_"``)."""
    m = row._mapping
    return Event(*(m[prefix + name] for name in Event.__dataclass_fields__))


def _dataclass_from_row(cls: type[T], row: Any, **read_otherwise: Any) -> T:
    """A domain dataclass from a row whose columns carry its field names, but for the fields
    ``read_otherwise`` gives (a column of another name, a value converted)."""
    m = row._mapping
    named = {name: m[name] for name in cls.__dataclass_fields__ if name not in read_otherwise}
    return cls(**named, **read_otherwise)


def delivery_from_row(row: Any) -> Delivery:
    return _dataclass_from_row(Delivery, row)


def schedule_from_row(row: Any) -> Schedule:
    return _dataclass_from_row(Schedule, row, input=row.input_json, budget=row.budget_json)


def thread_from_row(row: Any) -> Thread:
    return _dataclass_from_row(Thread, row, busy=bool(row.busy))


def message_from_row(row: Any) -> ThreadMessage:
    return ThreadMessage(index=row.idx, message=row.message, run_id=row.run_id, created_at=row.created_at)
