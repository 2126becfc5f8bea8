"""Schedule routes (docs/schedules.md): recurring runs by cron expression or fixed interval.

The workers' reaper pass turns each due slot into exactly one run; these routes only store,
show, pause and delete schedules.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.agents.registry import checked_agent
from app.api.admin import TENANT_PATTERN
from app.api.auth import Tenant, require_admin
from app.api.deps import RuntimeDep
from app.api.params import Cursor, Limit, decode_cursor, keyset_cursor, page_of, parse_id, uuid_path
from app.api.problems import ApiProblem, problems
from app.api.schemas import Budget, FiniteSeconds, ResponseModel, Storable, Webhook, response_model
from app.api.webhooks import UrlGuardDep, checked_webhook
from app.cron import MAX_EVERY_S, MIN_EVERY_S, ScheduleInvalid, Timing
from app.domain import Schedule

router = APIRouter(tags=["schedules"])
admin_router = APIRouter(
    prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=problems(401, 403, 503)
)


class CreateSchedule(BaseModel):
    """``POST /schedules``: exactly one of ``cron`` (five fields, read in ``timezone``) and
    ``every_s`` (at least 1), and the run each slot creates."""

    model_config = ConfigDict(extra="forbid", strict=True)

    cron: Annotated[str, Field(min_length=1, max_length=200, examples=["0 9 * * MON-FRI"])] | None = None
    # The bounds are published for clients; Timing.check enforces them with its stable code
    # (invalid_interval), which pydantic's own check would replace by validation_error.
    every_s: FiniteSeconds | None = Field(
        default=None,
        description="a fixed interval, at least 1 s",
        json_schema_extra={"minimum": MIN_EVERY_S, "maximum": MAX_EVERY_S},
    )
    timezone: Annotated[str, Field(min_length=1, max_length=100, examples=["Europe/Berlin"])] = "UTC"
    agent: Annotated[str, Field(min_length=1, max_length=200, examples=["demo"])]
    input: Annotated[dict[str, Any], Storable] = Field(default_factory=dict)  # what its runs could store
    budget: Budget | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    max_attempts: Annotated[int, Field(ge=1, le=100)] | None = Field(default=None, description="default RUNQ_MAX_ATTEMPTS")
    thread_id: Annotated[str, Field(max_length=100)] | None = None
    webhook: Webhook | None = None


class PatchSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    paused: bool


@response_model(
    Schedule,
    next_run_at=Field(description="the next slot; a paused schedule's is where it stopped"),
    ends_at=Field(description="no slot after it fires (a LangGraph cron's end_time); null: none"),
    error=Field(
        description="why the workers could not fire it last time (tried again a minute later); null once it fires"
    ),
    error_at=Field(description="when that happened"),
)
class ScheduleOut(ResponseModel[Schedule]):
    pass


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


async def parse_schedule_id(
    schedule_id: Annotated[str, uuid_path("The schedule's id (a UUID)")],
) -> uuid.UUID:
    return parse_id(schedule_id, "schedule")


ScheduleIdPath = Annotated[uuid.UUID, Depends(parse_schedule_id)]


@router.post("/schedules", status_code=status.HTTP_201_CREATED, response_model=ScheduleOut,
             responses=problems(400, 401, 404, 413, 422, 429, 503))  # fmt: skip
async def create_schedule(body: CreateSchedule, principal: Tenant, runtime: RuntimeDep, guard: UrlGuardDep) -> ScheduleOut:
    """A recurring run: one run per slot, created by the workers; after downtime only the latest
    missed slot runs. 429 `too_many_schedules` at the tenant's `max_schedules`; each slot's run
    takes the tenant's create rate like any create."""
    settings = runtime.settings
    try:
        timing = Timing(cron=body.cron, every_s=body.every_s, timezone=body.timezone).check()
    except ScheduleInvalid as exc:
        raise ApiProblem(422, exc.code, exc.detail) from exc
    checked_agent(settings.agent_registry, body.agent, body.input)  # each of its runs gets this input
    thread_id = None
    if body.thread_id is not None:  # its runs join the thread's queue (the enqueue strategy)
        thread_id = parse_id(body.thread_id, "thread")
        await runtime.queue.get_thread(thread_id, tenant_id=principal.tenant_id)  # 404 if not the tenant's
    schedule = await runtime.queue.create_schedule(
        tenant_id=principal.tenant_id,
        timing=timing,
        agent=body.agent,
        input=body.input,
        budget=body.budget.model_dump(exclude_none=True) if body.budget else {},
        priority=body.priority,
        max_attempts=body.max_attempts or settings.max_attempts,
        thread_id=thread_id,
        webhook=await checked_webhook(body.webhook, guard),
    )
    return ScheduleOut.of(schedule)




async def _page(runtime: RuntimeDep, tenant_id: str | None, limit: int, cursor: str | None) -> SchedulePage:
    found = await runtime.queue.list_schedules(
        tenant_id=tenant_id, limit=limit + 1, before=decode_cursor(cursor) if cursor else None
    )
    page, next_cursor = page_of(found, limit, keyset_cursor)
    return SchedulePage(items=[ScheduleOut.of(s) for s in page], next_cursor=next_cursor)


@router.get("/schedules", response_model=SchedulePage, responses=problems(400, 401, 422, 503))
async def list_schedules(principal: Tenant, runtime: RuntimeDep, limit: Limit = 50, cursor: Cursor = None) -> SchedulePage:
    """The tenant's schedules, newest first."""
    return await _page(runtime, principal.tenant_id, limit, cursor)


@admin_router.get("/schedules", response_model=SchedulePage, responses=problems(400, 422))
async def list_all_schedules(
    runtime: RuntimeDep,
    tenant: Annotated[str | None, Query(min_length=1, max_length=200, pattern=TENANT_PATTERN)] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> SchedulePage:
    """Schedules of every tenant (or of one), newest first, for the operators' UI."""
    return await _page(runtime, tenant, limit, cursor)


@router.get("/schedules/{schedule_id}", response_model=ScheduleOut, responses=problems(401, 404, 422, 503))
async def get_schedule(principal: Tenant, schedule_id: ScheduleIdPath, runtime: RuntimeDep) -> ScheduleOut:
    return ScheduleOut.of(await runtime.queue.get_schedule(schedule_id, tenant_id=principal.tenant_id))


@router.patch("/schedules/{schedule_id}", response_model=ScheduleOut, responses=problems(400, 401, 404, 413, 422, 503))
async def patch_schedule(
    principal: Tenant, schedule_id: ScheduleIdPath, body: PatchSchedule, runtime: RuntimeDep
) -> ScheduleOut:
    """Pause, or resume from the first slot after now (the slots a pause skipped never run)."""
    schedule = await runtime.queue.set_schedule_paused(schedule_id, tenant_id=principal.tenant_id, paused=body.paused)
    return ScheduleOut.of(schedule)


@router.delete("/schedules/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=problems(401, 404, 422, 503))  # fmt: skip
async def delete_schedule(principal: Tenant, schedule_id: ScheduleIdPath, runtime: RuntimeDep) -> Response:
    """Delete the schedule; the runs it created stay."""
    await runtime.queue.delete_schedule(schedule_id, tenant_id=principal.tenant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
