"""Values into and out of the queue's statements: JSON PostgreSQL can store, rows as events, list pages.

Values go in as JSON text (:func:`dumps`) and come out decoded: the driver decodes jsonb, so a
jsonb column is read as it is (decoding it again would turn the string ``"123"`` into 123).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from app.domain import Delivery, Event, Schedule, Thread, ThreadMessage, Usage
from app.errors import InvalidData

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

NewEvents = Sequence[tuple[str, Mapping[str, Any]]]
NewMessages = Sequence[Mapping[str, Any]]  # thread messages in OpenAI chat format
# A run's new events as its worker hands them to a batched statement: each data already JSON
# text (encode), so the statement carries nothing that can fail for one run.
EncodedEvents = Sequence[tuple[str, str]]
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


# The largest JSON value runq stores for a run (an event's data, an output, a checkpoint, an
# effect record, a wait payload, a thread message): RUNQ_MAX_DATA_BYTES' default.
MAX_DATA_BYTES = 8 * 1024 * 1024

# Dates and dataclasses go to ``default`` (str), as they always went: orjson's own forms differ.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_AS_TEXT = (datetime, date, time, uuid.UUID, Decimal)


def _default(value: Any) -> Any:
    """What JSON lacks but has a plain form; any other type is refused, never stored as its
    ``repr`` (which nothing could read back)."""
    if isinstance(value, Enum):  # as orjson writes it (json gets here for a plain Enum)
        return value.value
    if isinstance(value, _AS_TEXT) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return str(value)
    raise TypeError(f"an object of type {type(value).__name__} is not JSON")


def dumps(value: Any) -> str:
    """JSON text jsonb takes, or :class:`InvalidData` for a value JSON cannot hold (a key that
    is not a string, a number or null; an object of a type JSON lacks; a cycle).

    orjson writes most values in a tenth of json's time (an event's data, a run's output:
    microseconds of every run); it writes NaN and the infinities as null, as :func:`_storable`
    does, and refuses what json takes otherwise (integers past 64 bits, keys that are not
    strings, unpaired surrogates), which json then writes."""
    try:
        text = orjson.dumps(value, default=_default, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _json_dumps(value)
    return _json_dumps(value) if "\\u0000" in text else text


def encode(value: Any, *, what: str, limit: int = MAX_DATA_BYTES) -> str:
    """:func:`dumps`, refusing a value over ``limit`` bytes once encoded: what a batched
    statement carries is encoded run by run, before it joins the batch, so nothing in the
    statement can fail for one run (docs/reliability.md, "Faults stay where they start")."""
    try:
        text = dumps(value)
    except InvalidData as exc:
        raise InvalidData(f"{what}: {exc}") from exc
    # a character is at most 4 bytes of UTF-8: most values need no count of their bytes
    if len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
        raise InvalidData(f"{what}: {_size(len(text.encode('utf-8', 'surrogatepass')))} once encoded, "
                          f"over the limit of {_size(limit)} (RUNQ_MAX_DATA_BYTES)")
    return text


def _size(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n:,} bytes"


def _json_dumps(value: Any) -> str:
    try:
        try:
            text = json.dumps(value, separators=(",", ":"), default=_default, allow_nan=False)
        except ValueError as exc:  # NaN or an infinity, which JSON lacks: stored as null
            if "Circular reference" in str(exc):
                raise
            return json.dumps(_storable(value), separators=(",", ":"), default=_default, allow_nan=False)
        # Both come out as escapes (ensure_ascii): walk the value only when one may be there.
        if "\\u0000" in text or "\\ud" in text:
            text = json.dumps(_storable(value), separators=(",", ":"), default=_default)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidData(_reason(exc)) from exc
    return text


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply for JSON"
    if isinstance(exc, ValueError) and "Circular reference" in str(exc):
        return "it contains itself (a cycle), which JSON cannot hold"
    return str(exc)


def events_params(events: NewEvents) -> dict[str, list[str]]:
    """``:types`` and ``:datas``, the two arrays a statement unnests into a run's new events
    (the runtime's own: the worker's are encoded run by run, :class:`EncodedEvents`)."""
    return {"types": [storable_text(t) for t, _ in events], "datas": [dumps(d) for _, d in events]}


def encoded_events_params(events: EncodedEvents) -> dict[str, list[str]]:
    """:func:`events_params` of events whose data is JSON text already."""
    return {"types": [storable_text(t) for t, _ in events], "datas": [d for _, d in events]}


def messages_params(messages: Sequence[tuple[Any, Any, Sequence[str]]]) -> dict[str, list[Any]]:
    """``:message_run_ids``, ``:message_lease_ids`` and ``:messages`` for the fenced statements,
    from ``(run_id, lease_id, messages as JSON text)``."""
    return {
        "message_run_ids": [run_id for run_id, _, batch in messages for _ in batch],
        "message_lease_ids": [lease_id for _, lease_id, batch in messages for _ in batch],
        "messages": [m for _, _, batch in messages for m in batch],
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
