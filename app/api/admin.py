"""The operators' routes (docs/contract.md, section 4): every tenant's runs, requeue, workers, stats, caps.

Admin keys only: the router-wide dependency answers a tenant key with 403 ``forbidden``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query, status

from app.api.admin_schemas import (
    AdminRunOut,
    AdminRunPage,
    StatsOut,
    TenantLimitIn,
    TenantOut,
    WorkerList,
    WorkerOut,
)
from app.api.auth import require_admin
from app.api.deps import Runtime, RuntimeDep
from app.api.params import Cursor, Limit, RunIdPath, decode_cursor, keyset_cursor, page_of
from app.api.problems import problems
from app.api.schemas import StreamToken, StreamTokenRequest
from app.api.tokens import stream_token
from app.domain import Status
from app.metrics import RUNS_REQUEUED, count_ending

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=problems(401, 403, 503),
)

# PostgreSQL text cannot hold NUL: refuse control characters here rather than fail there.
TENANT_PATTERN = r"^[^\x00-\x1f\x7f]+$"
TenantPath = Annotated[
    str, Path(min_length=1, max_length=200, pattern=TENANT_PATTERN, description="the tenant's name")
]


@router.get("/runs", response_model=AdminRunPage, responses=problems(400, 422))
async def list_runs(
    runtime: RuntimeDep,
    status: Status | None = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=200, pattern=TENANT_PATTERN)] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> AdminRunPage:
    """Runs of every tenant (or of one), newest first, with their lease fields."""
    runs = await runtime.queue.list_runs(
        tenant_id=tenant, status=status, limit=limit + 1, before=decode_cursor(cursor) if cursor else None
    )
    page, next_cursor = page_of(runs, limit, keyset_cursor)
    return AdminRunPage(items=[AdminRunOut.of(r) for r in page], next_cursor=next_cursor)


@router.get("/runs/{run_id}", response_model=AdminRunOut, responses=problems(404, 422))
async def get_run(run_id: RunIdPath, runtime: RuntimeDep) -> AdminRunOut:
    return AdminRunOut.of(await runtime.queue.get_run(run_id, tenant_id=None))


@router.post("/runs/{run_id}/requeue", response_model=AdminRunOut, responses=problems(404, 409, 422))
async def requeue_run(run_id: RunIdPath, runtime: RuntimeDep) -> AdminRunOut:
    """A dead or cancelled run back to pending at attempt 0; its events stay and a
    ``run.queued`` continues the same seq numbering. Any other status is 409 ``not_requeueable``."""
    run = await runtime.queue.requeue(run_id)
    RUNS_REQUEUED.inc()
    return AdminRunOut.of(run)


@router.post(
    "/runs/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=AdminRunOut,
    responses=problems(404, 409, 422),
)
async def cancel_run(run_id: RunIdPath, runtime: RuntimeDep) -> AdminRunOut:
    """Stop any tenant's run, with ``cancel_reason`` ``operator`` (as `runq runs cancel`)."""
    run = await runtime.queue.request_cancel(run_id, tenant_id=None, reason="operator")
    count_ending(run)  # cancelled now if it was pending; a leased run is ended by its worker
    return AdminRunOut.of(run)


@router.post("/runs/{run_id}/stream-token", response_model=StreamToken, responses=problems(400, 404, 413, 422))
async def create_stream_token(
    run_id: RunIdPath, runtime: RuntimeDep, body: Annotated[StreamTokenRequest | None, Body()] = None
) -> StreamToken:
    """A stream token for any tenant's run, so an operator's browser can follow it at
    `GET /runs/{id}/events?token=…` (and, with the `resume` scope, answer its wait); the token
    is bound to that run and its tenant."""
    run = await runtime.queue.get_run(run_id, tenant_id=None)
    return stream_token(run, runtime.settings, (body or StreamTokenRequest()).scopes)


@router.get("/workers", response_model=WorkerList)
async def list_workers(runtime: RuntimeDep) -> WorkerList:
    """Every worker that is up, idle ones included: slots in use of its concurrency, version,
    last heartbeat, and its live leases with each one's age and last renewal."""
    return WorkerList(items=[WorkerOut.of(w) for w in await runtime.queue.list_workers()])


@router.get("/stats", response_model=StatsOut)
async def stats(runtime: RuntimeDep) -> StatsOut:
    """Counts by status, in-flight runs per tenant, the oldest pending age, dead in the last hour."""
    return StatsOut.of(await runtime.queue.stats())


@router.get("/tenants/{tenant}", response_model=TenantOut, responses=problems(422))
async def get_tenant(tenant: TenantPath, runtime: RuntimeDep) -> TenantOut:
    """The tenant's in-flight cap: its override, the default, and the one that applies."""
    return _tenant(runtime, tenant, await runtime.queue.tenant_limit(tenant))


@router.put("/tenants/{tenant}", response_model=TenantOut, responses=problems(400, 422))
async def set_tenant(tenant: TenantPath, body: TenantLimitIn, runtime: RuntimeDep) -> TenantOut:
    """Override the tenant's in-flight cap (0 = no cap). Workers see a new override within a
    few seconds (they look for overrides every 5 s)."""
    await runtime.queue.set_tenant_limit(tenant_id=tenant, max_inflight=body.max_inflight)
    return _tenant(runtime, tenant, body.max_inflight)


def _tenant(runtime: Runtime, tenant: str, override: int | None) -> TenantOut:
    default = runtime.settings.tenant_max_inflight
    return TenantOut(
        tenant_id=tenant,
        max_inflight=override,
        default_max_inflight=default,
        effective_max_inflight=default if override is None else override,
    )
