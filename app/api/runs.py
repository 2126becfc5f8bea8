"""The tenant's routes: create, read, list, cancel and resume runs; read and follow their events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response, status

from app.agents.registry import checked_agent
from app.api.auth import Canceller, Reader, Resumer, Tenant
from app.api.deps import Runtime, RuntimeDep
from app.api.keys import Principal
from app.api.params import Cursor, Limit, RunIdPath, decode_cursor, keyset_cursor, page_of
from app.api.problems import ApiProblem, created_responses, problems
from app.api.schemas import (
    CancelRun,
    CreateRun,
    EventOut,
    EventPage,
    ResumeRun,
    RunOut,
    RunPage,
    StreamToken,
    StreamTokenRequest,
)
from app.api.stream import event_stream
from app.api.tokens import stream_token
from app.api.webhooks import UrlGuardDep, checked_webhook
from app.domain import Status
from app.errors import NotWaiting
from app.guards.redact import redact, redact_data
from app.guards.ssrf import UrlGuard
from app.metrics import RESUMES, RUNS_CREATED, WAIT_SECONDS, count_ending
from app.queue import NewRun, request_hash
from app.tracing import run_traceparent

router = APIRouter(tags=["runs"])

MAX_SEQ = 2**31 - 1  # run_events.seq is an int4
SSE_MEDIA_TYPE = "text/event-stream"


@router.post(
    "/runs",
    status_code=status.HTTP_201_CREATED,
    response_model=RunOut,
    responses=created_responses(RunOut, 400, 401, 409, 413, 422, 429, 503),
)
async def create_run(
    body: CreateRun,
    http_request: Request,
    principal: Tenant,
    runtime: RuntimeDep,
    response: Response,
    guard: UrlGuardDep,
    idempotency_key: Annotated[
        str | None,
        Header(min_length=1, max_length=255, description="Repeats with the same key return the same run"),
    ] = None,
) -> RunOut:
    """Create a run; it is pending at once and a worker picks it up."""
    new = await new_run(
        body, principal, runtime, guard, idempotency_key,
        traceparent=run_traceparent(http_request.headers.get("traceparent")),
    )
    run, created = await runtime.queue.enqueue(new)
    if created:
        RUNS_CREATED.labels(agent=run.agent).inc()
    else:
        response.status_code = status.HTTP_200_OK
    return RunOut.of(run)


async def new_run(
    body: CreateRun,
    principal: Principal,
    runtime: Runtime,
    guard: UrlGuard,
    idempotency_key: str | None,
    *,
    traceparent: str | None = None,
) -> NewRun:
    """The run a create body asks for, checked (agent, its input, webhook URL), with its request digest
    for idempotent repeats (the whole body: a thread run's strategy too)."""
    settings = runtime.settings
    checked_agent(settings.agent_registry, body.agent, body.input)  # 422 before anything is stored
    webhook = await checked_webhook(body.webhook, guard)
    request: dict[str, Any] = body.model_dump(mode="json") | {
        "budget": body.budget.model_dump(exclude_none=True) if body.budget else {},
        "max_attempts": body.max_attempts or settings.max_attempts,
    }
    return NewRun(
        tenant_id=principal.tenant_id,
        agent=body.agent,
        input=body.input,
        budget=request["budget"],
        priority=body.priority,
        max_attempts=request["max_attempts"],
        delay_s=body.delay_s,
        on_disconnect=body.on_disconnect,
        disconnect_grace_s=body.disconnect_grace_s,
        idempotency_key=idempotency_key,
        request_digest=request_hash(request) if idempotency_key else None,
        webhook=webhook,
        traceparent=traceparent,
    )


@router.get("/runs", response_model=RunPage, responses=problems(400, 401, 422, 503))
async def list_runs(
    principal: Tenant,
    runtime: RuntimeDep,
    status: Status | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> RunPage:
    """The tenant's runs, newest first."""
    runs = await runtime.queue.list_runs(
        tenant_id=principal.tenant_id,
        status=status,
        limit=limit + 1,
        before=decode_cursor(cursor) if cursor else None,
    )
    page, next_cursor = page_of(runs, limit, keyset_cursor)
    return RunPage(items=[RunOut.of(r) for r in page], next_cursor=next_cursor)


@router.get("/runs/{run_id}", response_model=RunOut, responses=problems(401, 404, 422, 503))
async def get_run(principal: Tenant, run_id: RunIdPath, runtime: RuntimeDep) -> RunOut:
    return RunOut.of(await runtime.queue.get_run(run_id, tenant_id=principal.tenant_id))


@router.post(
    "/runs/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunOut,
    responses=problems(400, 401, 403, 404, 409, 413, 422, 503),
)
async def cancel_run(
    caller: Canceller,
    run_id: RunIdPath,
    runtime: RuntimeDep,
    body: Annotated[CancelRun | None, Body()] = None,
) -> RunOut:
    """Stop a run: a pending one is cancelled now, a leased one once its worker notices. Also
    with a thread token that has the `cancel` scope, for a run of its thread."""
    if caller.grant is not None:
        await caller.found_run(run_id)
    run = await runtime.queue.request_cancel(
        run_id,
        tenant_id=caller.tenant_id,
        reason="user",
        note=redact(body.note) if body and body.note else None,  # event data is stored redacted
    )
    count_ending(run)  # cancelled now if it was pending; a leased run is ended by its worker
    return RunOut.of(run)


@router.post(
    "/runs/{run_id}/resume",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunOut,
    responses=problems(400, 401, 403, 404, 409, 413, 422, 503),
)
async def resume_run(caller: Resumer, run_id: RunIdPath, runtime: RuntimeDep, body: ResumeRun) -> RunOut:
    """Resume a waiting run with a value for its open wait; it is pending at once (docs/waits.md).
    Also with `?token=` from a stream token that has the `resume` scope, or with a thread token
    that has it, for a run of its thread."""
    if caller.grant is not None:
        await caller.found_run(run_id)
    try:
        resumed = await runtime.queue.resume(
            run_id,
            tenant_id=caller.tenant_id,
            value=redact_data(body.value),  # event data is stored redacted
            waitpoint_id=body.waitpoint_id,
        )
    except NotWaiting:
        RESUMES.labels(outcome="not_waiting").inc()
        raise
    RESUMES.labels(outcome="value").inc()
    WAIT_SECONDS.observe(resumed.waited_s)
    return RunOut.of(resumed.run)


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and SSE_MEDIA_TYPE not in accept


def event_cursor(after: int, last_event_id: str | None) -> int:
    """``Last-Event-ID`` (what a reconnecting EventSource sends) wins over ``?after=``."""
    if last_event_id is None:
        return after
    value = last_event_id.strip()
    if not value.isascii() or not value.isdigit() or int(value) > MAX_SEQ:
        raise ApiProblem(400, "invalid_cursor", "Last-Event-ID must be an event seq")
    return int(value)


@router.get(
    "/runs/{run_id}/events",
    response_model=EventPage,
    responses={
        200: {
            "description": "SSE (`id: <seq>`, `event: <type>`, `data: <json>`), or with "
            "`Accept: application/json` a page of events",
            "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        },
        **problems(400, 401, 403, 404, 422, 429, 503),
    },
)
async def run_events(
    request: Request,
    caller: Reader,
    run_id: RunIdPath,
    runtime: RuntimeDep,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="resume after this seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size of the JSON form")] = 100,
    keepalive: Annotated[
        Literal["comment", "event"],
        Query(description="how the stream's keep-alive is sent: a comment, or an event `ping` "
              "(no id) that a browser EventSource can see"),
    ] = "comment",
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> EventPage | Response:
    """Replay the run's events after the cursor, then follow live ones until the run ends.
    Also with a stream token of the run or a thread token of its thread (`?token=` or bearer).
    A stream holds one of the tenant's stream slots while open (`429 too_many_streams` past
    its `max_streams`)."""
    run = await caller.found_run(run_id)
    cursor = event_cursor(after, last_event_id)
    if _wants_json(request):
        # One more than asked says whether a stored event follows the page.
        events = await runtime.queue.read_events(run.id, after=cursor, limit=limit + 1)
        page = events[:limit]
        next_after = page[-1].seq if len(events) > limit else None
        return EventPage(items=[EventOut.of(e) for e in page], next_after=next_after)
    slot = await runtime.presence.stream_slot(run.tenant_id)
    return slot.serving(
        event_stream(
            run,
            after=cursor,
            hub=runtime.hub,
            presence=runtime.presence,
            poll_s=runtime.settings.poll_s,
            ping_s=runtime.sse_ping_s,
            ping_event=keepalive == "event",
        )
    )


@router.post(
    "/runs/{run_id}/stream-token", response_model=StreamToken, responses=problems(400, 401, 404, 413, 422, 503)
)
async def create_stream_token(
    principal: Tenant,
    run_id: RunIdPath,
    runtime: RuntimeDep,
    body: Annotated[StreamTokenRequest | None, Body()] = None,
) -> StreamToken:
    """A short-lived token for `GET /runs/{id}/events?token=…` (a browser EventSource sends no
    headers); with the `resume` scope also for `POST /runs/{id}/resume?token=…`."""
    run = await runtime.queue.get_run(run_id, tenant_id=principal.tenant_id)
    return stream_token(run, runtime.settings, (body or StreamTokenRequest()).scopes)
