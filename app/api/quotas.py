"""The answer to a tenant over one of its limits (docs/limits.md): ``429`` with a stable code,
``Retry-After``, and the IETF httpapi draft's ``RateLimit-Policy`` / ``RateLimit`` headers, so
that a client (ours, or one written for another API that sends them) knows when to try again."""

from __future__ import annotations

import math

from fastapi.responses import JSONResponse

from app.api.problems import problem_response
from app.errors import LimitExceeded
from app.metrics import LIMITED

DETAILS = {
    "rate": "this tenant creates runs faster than its limit allows; try again after Retry-After",
    "pending": "this tenant has as many runs pending or waiting as its limit allows",
    "streams": "this tenant has as many event streams open as its limit allows",
    "schedules": "this tenant has as many schedules as its limit allows; delete one to make room",
}
# The policy names of the RateLimit headers, one per limit.
POLICIES = {"rate": "create", "pending": "pending", "streams": "streams", "schedules": "schedules"}


def limit_headers(exc: LimitExceeded) -> dict[str, str]:
    """``Retry-After`` in whole seconds (at least 1), and the draft's structured fields: the
    policy (quota ``q``, window ``w`` for the rate) and what is left of it now (``r=0``, reset ``t``)."""
    retry_after = max(1, math.ceil(exc.retry_after_s))
    name = POLICIES[exc.limit]
    policy = f'"{name}";q={int(exc.quota)}'
    if exc.window_s:
        policy += f";w={max(1, math.ceil(exc.window_s))}"
    return {
        "Retry-After": str(retry_after),
        "RateLimit-Policy": policy,
        "RateLimit": f'"{name}";r=0;t={retry_after}',
    }


def limit_response(exc: LimitExceeded, *, instance: str | None) -> JSONResponse:
    LIMITED.labels(tenant=exc.tenant_id, limit=exc.limit).inc()
    return problem_response(
        429,
        exc.code,
        DETAILS[exc.limit],
        instance=instance,
        headers=limit_headers(exc),
        limit=exc.limit,
        quota=exc.quota,
    )
