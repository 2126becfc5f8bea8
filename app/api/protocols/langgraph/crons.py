"""LangGraph's crons (§17) are runq's schedules (§11): ``POST /runs/crons`` and ``POST
/threads/{id}/runs/crons`` store a schedule whose every slot creates one run of the assistant's
graph, exactly once cluster-wide (the slot is the run's idempotency key); search, count, update,
delete. The cron's run fields are the schedule's run input, as a ``/langgraph`` run stores its
body, so a cron's runs are the runs the same request to ``/runs`` would make.

``end_time`` is the schedule's end: no slot after it fires. What runq's schedules do not have is
refused, never dropped: ``on_run_completed: keep`` (a stateless runq run has no thread to keep:
422 ``cron_keep_unsupported``) and a ``multitask_strategy`` other than ``enqueue``
(a slot's run waits its turn in the thread: 422 ``cron_strategy_unsupported``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Response, status
from pydantic import Field

from app.agents.registry import checked_agent
from app.api.deps import Runtime, RuntimeDep
from app.api.params import parse_id, uuid_path
from app.api.problems import ApiProblem, problems
from app.api.protocols.langgraph.auth import Tenant
from app.api.protocols.langgraph.graphs import assistants, merged, resolve
from app.api.protocols.langgraph.schemas import (
    Body,
    Offset,
    RunCreate,
    StreamMode,
    ThreadId,
    WebhookUrl,
    runq_webhook,
)
from app.api.schemas import Integral, StoredObject, StoredText, StoredValue
from app.api.webhooks import UrlGuardDep, checked_webhook
from app.cron import ScheduleInvalid, Timing
from app.domain import Schedule
from app.queue.schedules import Keep, ScheduleFilter

router = APIRouter()

CronId = Annotated[str, uuid_path("The cron's id (a UUID: the id of the runq schedule it is)")]
CRON_ID = "{cron_id:uuid_text}"  # matched as a UUID by the router: PATCH /runs/crons/search is a 405
Moment = Annotated[datetime, Field(strict=False)]  # an ISO 8601 string in JSON
SORT_COLUMNS = {"created_at": "created_at", "updated_at": "updated_at", "next_run_date": "next_run_at"}
ERRORS = problems(400, 401, 403, 404, 422, 429, 503)


class CronCreate(RunCreate):
    """A cron: the run each slot makes (a ``/langgraph`` run's fields) and when."""

    schedule: Annotated[StoredText, Field(min_length=1, max_length=200, description="five cron fields")]
    timezone: Annotated[StoredText, Field(min_length=1, max_length=100)] | None = None
    end_time: Moment | None = None
    enabled: bool = True
    on_run_completed: Literal["delete", "keep"] | None = None


class CronPatch(Body):
    schedule: Annotated[StoredText, Field(min_length=1, max_length=200)] | None = None
    timezone: Annotated[StoredText, Field(min_length=1, max_length=100)] | None = None
    end_time: Moment | None = None
    enabled: bool | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    webhook: WebhookUrl | None = None
    input: StoredValue = None
    metadata: StoredObject | None = None
    config: StoredObject | None = None
    context: StoredObject | None = None
    interrupt_before: list[StoredText] | Literal["*"] | None = None
    interrupt_after: list[StoredText] | Literal["*"] | None = None
    stream_mode: StreamMode | list[StreamMode] | None = None


class CronCountRequest(Body):
    assistant_id: StoredText | None = None
    thread_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    metadata: StoredObject | None = None


class CronSearch(CronCountRequest):
    enabled: bool | None = None
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    offset: Offset = 0
    sort_by: Literal["created_at", "updated_at", "next_run_date"] = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[StoredText] | None = None


def cron_json(schedule: Schedule) -> dict[str, Any]:
    """A schedule as LangGraph shows a cron; ``payload`` is the run fields each slot uses."""
    payload = dict(schedule.input)
    return {
        "cron_id": str(schedule.id),
        "assistant_id": payload.get("assistant_id"),
        "thread_id": None if schedule.thread_id is None else str(schedule.thread_id),
        "on_run_completed": "delete" if schedule.thread_id is None else None,
        "end_time": None if schedule.ends_at is None else schedule.ends_at.isoformat(),
        "schedule": schedule.cron,
        "timezone": schedule.timezone,
        "created_at": schedule.created_at.isoformat(),
        "updated_at": schedule.updated_at.isoformat(),
        "payload": payload,
        "user_id": None,
        "next_run_date": schedule.next_run_at.isoformat(),
        "metadata": payload.get("metadata", {}),
        "enabled": not schedule.paused,
    }


def _timing(schedule: str, timezone: str | None) -> Timing:
    try:
        return Timing(cron=schedule, every_s=None, timezone=timezone or "UTC").check()
    except ScheduleInvalid as exc:
        raise ApiProblem(422, exc.code, exc.detail) from exc


def _refuse_unsupported(on_run_completed: str | None, strategy: str = "enqueue") -> None:
    if strategy != "enqueue":
        raise ApiProblem(422, "cron_strategy_unsupported", "a cron's runs join their thread's queue (enqueue)")
    if on_run_completed == "keep":
        raise ApiProblem(422, "cron_keep_unsupported", "a stateless runq run has no thread to keep")


async def _create(principal: Tenant, runtime: Runtime, guard: UrlGuardDep, body: CronCreate,
                  thread_id: uuid.UUID | None) -> dict[str, Any]:  # fmt: skip
    queue = runtime.queue
    if thread_id is not None:  # 404 unless the tenant's, before anything about the body
        await queue.get_thread(thread_id, tenant_id=principal.tenant_id)
    _refuse_unsupported(body.on_run_completed, body.multitask_strategy)
    timing = _timing(body.schedule, body.timezone)
    found = await resolve(runtime, principal.tenant_id, body.assistant_id, status=422)
    # An assistant of one's own: its config and context as they are now, under the cron's own.
    run_input = body.model_copy(update={"assistant_id": str(found.assistant_id), **merged(found, body)}).run_input()
    checked_agent(runtime.settings.agent_registry, found.graph_id, run_input)
    if thread_id is not None:  # LangGraph's server names the thread's graph; its state routes read it
        graph = {"graph_id": found.graph_id, "assistant_id": str(found.assistant_id)}
        await queue.merge_thread_metadata(thread_id, tenant_id=principal.tenant_id, metadata=graph)
    schedule = await queue.create_schedule(
        tenant_id=principal.tenant_id,
        timing=timing,
        agent=found.graph_id,
        input=run_input,
        budget={},
        priority=0,
        max_attempts=runtime.settings.max_attempts,
        thread_id=thread_id,
        webhook=await checked_webhook(runq_webhook(body.webhook), guard),
        ends_at=body.end_time,
    )
    if not body.enabled:
        schedule = await queue.set_schedule_paused(schedule.id, tenant_id=principal.tenant_id, paused=True)
    return cron_json(schedule)


@router.post("/runs/crons", responses=ERRORS)
async def create_cron(principal: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, body: CronCreate) -> dict[str, Any]:
    """A stateless cron: each slot makes one run of the assistant's graph."""
    return await _create(principal, runtime, guard, body, None)


@router.post("/threads/{thread_id}/runs/crons", responses=ERRORS)
async def create_thread_cron(
    principal: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, thread_id: ThreadId, body: CronCreate
) -> dict[str, Any]:
    """A cron on a thread: each slot's run joins the thread's queue (the enqueue strategy)."""
    return await _create(principal, runtime, guard, body, parse_id(thread_id, "thread"))


def _matching(
    runtime: Runtime, assistant_id: str | None, metadata: dict[str, Any] | None, **filters: Any
) -> ScheduleFilter:
    """The schedules that are crons of the graphs served (of one assistant when named: by its
    id or its graph's; an unknown one matches none)."""
    contains: dict[str, Any] = {"metadata": metadata} if metadata else {}
    served = assistants(runtime)
    if assistant_id is not None:
        named = [str(a.assistant_id) for a in served if assistant_id in (a.graph_id, str(a.assistant_id))]
        contains["assistant_id"] = named[0] if named else assistant_id
    return ScheduleFilter(agents=[a.graph_id for a in served], input_contains=contains, **filters)


@router.post("/runs/crons/search", responses=ERRORS)
async def search_crons(principal: Tenant, runtime: RuntimeDep, body: CronSearch) -> list[dict[str, Any]]:
    paused = None if body.enabled is None else not body.enabled
    found = await runtime.queue.search_schedules(
        tenant_id=principal.tenant_id,
        matching=_matching(runtime, body.assistant_id, body.metadata, thread_id=body.thread_id, paused=paused),
        sort_by=SORT_COLUMNS[body.sort_by],
        descending=body.sort_order == "desc",
        limit=body.limit,
        offset=body.offset,
    )
    crons = [cron_json(schedule) for schedule in found]
    if body.select:
        return [{k: v for k, v in cron.items() if k in body.select} for cron in crons]
    return crons


@router.post("/runs/crons/count", responses=ERRORS)
async def count_crons(principal: Tenant, runtime: RuntimeDep, body: CronCountRequest) -> int:
    matching = _matching(runtime, body.assistant_id, body.metadata, thread_id=body.thread_id)
    return await runtime.queue.count_schedules(tenant_id=principal.tenant_id, matching=matching)


@router.patch(f"/runs/crons/{CRON_ID}", responses=ERRORS)
async def update_cron(
    principal: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, cron_id: CronId, body: CronPatch
) -> dict[str, Any]:
    """Change the timing (from its first slot after now), the end (null: none), the run fields,
    the webhook, or ``enabled`` (a cron enabled again starts from its first slot after now)."""
    _refuse_unsupported(body.on_run_completed)
    schedule_id = parse_id(cron_id, "schedule")
    current = await runtime.queue.get_schedule(schedule_id, tenant_id=principal.tenant_id)
    changed = body.model_dump(
        include={"input", "metadata", "config", "context", "interrupt_before", "interrupt_after"}, exclude_none=True
    )
    if body.stream_mode is not None:
        changed["stream_mode"] = [body.stream_mode] if isinstance(body.stream_mode, str) else body.stream_mode
    run_input = {**current.input, **changed}
    checked_agent(runtime.settings.agent_registry, current.agent, run_input)
    webhook = await checked_webhook(runq_webhook(body.webhook), guard)
    timing = None
    if body.schedule is not None or body.timezone is not None:
        timing = _timing(body.schedule or current.cron or "", body.timezone or current.timezone)
    schedule = await runtime.queue.update_schedule(
        schedule_id,
        tenant_id=principal.tenant_id,
        paused=None if body.enabled is None else not body.enabled,
        timing=timing,
        input=run_input if changed else None,
        webhook=webhook,
        ends_at=body.end_time if "end_time" in body.model_fields_set else Keep.KEEP,  # null: no end
    )
    return cron_json(schedule)


@router.delete(f"/runs/crons/{CRON_ID}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=ERRORS)  # fmt: skip
async def delete_cron(principal: Tenant, runtime: RuntimeDep, cron_id: CronId) -> Response:
    """Delete the cron; the runs it made stay."""
    await runtime.queue.delete_schedule(parse_id(cron_id, "schedule"), tenant_id=principal.tenant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
