"""Liveness, readiness and metrics: no key needed, no tenant data."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from app.api.deps import RuntimeDep
from app.api.problems import problems
from app.api.schemas import Health
from app.errors import DatabaseUnavailable
from app.metrics import QUEUE_GAUGES

router = APIRouter(tags=["operations"])

READY_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up (says nothing about the database)."""
    return Health()


# A standby answers SELECT 1 too: ready means a primary that takes writes.
WRITABLE = text("SELECT NOT pg_is_in_recovery() AND NOT current_setting('transaction_read_only')::bool")


@router.get("/readyz", response_model=Health, responses=problems(503))
async def readyz(runtime: RuntimeDep) -> Health:
    """Ready to serve: the database answers and takes writes."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S), runtime.engine.connect() as conn:
            if not await conn.scalar(WRITABLE):
                await conn.invalidate()  # a session on a read-only server: the next one looks again
                raise DatabaseUnavailable("the database takes no writes (a standby, or read-only)")
    except TimeoutError as exc:
        raise DatabaseUnavailable("the database did not answer in time") from exc
    return Health()


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
async def metrics(runtime: RuntimeDep) -> Response:
    await QUEUE_GAUGES.refresh(runtime.queue)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
