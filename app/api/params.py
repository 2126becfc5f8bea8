"""Request parameters with their own error codes: run ids and opaque list cursors, and the
page every list route returns."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Path, Query

from app.api.problems import ApiProblem


def parse_id(value: str, what: str) -> uuid.UUID:
    """A path id as a UUID, or 422 ``invalid_id`` naming what it identifies."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise ApiProblem(422, "invalid_id", f"the {what} id must be a UUID") from exc


def uuid_path(description: str, example: str | None = None) -> Any:
    """A path id's parameter, for ``Annotated[str, uuid_path(...)]``: typed as a string, so a
    malformed id gets our own problem code (``invalid_id``, :func:`parse_id`), and documented
    as a UUID, so clients and fuzzers know what is valid."""
    examples = [example] if example is not None else None
    return Path(description=description, examples=examples, json_schema_extra={"format": "uuid"})


async def parse_run_id(  # async: a plain ``def`` dependency would hop to a worker thread
    run_id: Annotated[str, uuid_path("The run's id (a UUID)", "0b7c9a52-5b0c-4a8e-9c4e-2f7d3e1a6b10")],
) -> uuid.UUID:
    return parse_id(run_id, "run")


RunIdPath = Annotated[uuid.UUID, Depends(parse_run_id)]


def encode_cursor(created_at: datetime, run_id: uuid.UUID) -> str:
    """The keyset position after a page, opaque to clients."""
    return base64.urlsafe_b64encode(json.dumps([created_at.isoformat(), str(run_id)]).encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, run_id = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        position = datetime.fromisoformat(created_at), uuid.UUID(run_id)
    except (ValueError, TypeError, UnicodeError, binascii.Error) as exc:
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out") from exc
    if position[0].tzinfo is None:
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out")
    return position


Limit = Annotated[int, Query(ge=1, le=200)]
Cursor = Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page")]

T = TypeVar("T")


def page_of(found: Sequence[T], limit: int, cursor_of: Callable[[T], str]) -> tuple[Sequence[T], str | None]:
    """A list route reads ``limit + 1`` rows: the page is the first ``limit``, and the extra
    row, when it came, says another page follows; its cursor is the page's last row's."""
    page = found[:limit]
    return page, cursor_of(page[-1]) if len(found) > limit else None


class _Keyed(Protocol):
    @property
    def created_at(self) -> datetime: ...
    @property
    def id(self) -> uuid.UUID: ...


def keyset_cursor(row: _Keyed) -> str:
    """The cursor after a row of a list newest first (runs, threads)."""
    return encode_cursor(row.created_at, row.id)
