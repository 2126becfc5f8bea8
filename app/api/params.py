"""Request parameters with their own error codes: run ids and opaque list cursors."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Path

from app.api.problems import ApiProblem


def parse_id(value: str, what: str) -> uuid.UUID:
    """A path id as a UUID, or 422 ``invalid_id`` naming what it identifies."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise ApiProblem(422, "invalid_id", f"the {what} id must be a UUID") from exc


async def parse_run_id(  # async: a plain ``def`` dependency would hop to a worker thread
    # Typed as a string, so a malformed id gets our own problem code (``invalid_id``), and
    # documented as a UUID, so clients and fuzzers know what is valid.
    run_id: Annotated[
        str,
        Path(
            description="The run's id (a UUID)",
            examples=["0b7c9a52-5b0c-4a8e-9c4e-2f7d3e1a6b10"],
            json_schema_extra={"format": "uuid"},
        ),
    ],
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
