"""RFC 9457 problem details: the one error shape of the API, each with a stable ``code``."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

PROBLEM_MEDIA_TYPE = "application/problem+json"


class Problem(BaseModel):
    """An error response; ``code`` is stable, ``detail`` is for people."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None


class ApiProblem(Exception):
    """An HTTP-level error raised by routes and dependencies, rendered as a :class:`Problem`."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra


def problem_response(
    status: int,
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = Problem(
        type=f"urn:runq:problem:{code}",
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        code=code,
        instance=instance,
        **extra,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=status,
        headers=dict(headers or {}),
        media_type=PROBLEM_MEDIA_TYPE,
    )


def created_responses(model: type, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a create that takes an Idempotency-Key: 201 for a new object, 200 (the
    same object) for a repeat of the same key and body, and the problems it can answer with."""
    return {
        200: {"model": model, "description": "A repeat with the same Idempotency-Key and body"}
    } | problems(*statuses)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the problems a route can answer with."""
    return {
        status: {
            "model": Problem,
            "description": HTTPStatus(status).phrase,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
