"""AG-UI over runq (docs/frontends-ag-ui.md): ``@ag-ui/client``'s ``HttpAgent`` posts a
``RunAgentInput`` and reads the run as AG-UI events, translated from the event log.

``runId`` is the idempotency key of what a POST starts — a new run of the thread, or the
resume of its waiting run — so a repeat streams the same. Frames carry ``id: <seq>``, and
``GET /ag-ui/runs/{run_id}/events`` with ``Last-Event-ID`` or ``?after=`` resumes a stream:
runq's extension, since AG-UI has no resume of its own.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse

from app.api.auth import Caller, Reader, Runner
from app.api.deps import Runtime, RuntimeDep
from app.api.problems import ApiProblem, problems
from app.api.protocols.ag_ui_events import Segment, frames, translate_page
from app.api.protocols.ag_ui_schemas import ResumeEntry, RunAgentInput
from app.api.runs import MAX_SEQ, SSE_MEDIA_TYPE, event_cursor, new_run
from app.api.schemas import NO_NUL, CreateRun
from app.api.stream import SEND_TIMEOUT_S, follow_pages
from app.api.webhooks import UrlGuardDep
from app.domain import Run, Status, Strategy, Thread
from app.errors import NotWaiting, RunNotFound
from app.guards.redact import redact_data
from app.guards.ssrf import UrlGuard
from app.metrics import RESUMES, RUNS_CREATED, WAIT_SECONDS
from app.queue import request_hash
from app.tracing import run_traceparent

router = APIRouter(tags=["ag-ui"])

KEY_PREFIX = "ag-ui:"  # a client's runId as an idempotency key, apart from POST /runs' keys
REPEAT_SEARCH_RUNS = 5  # a repeated resume looks for its wait among the thread's latest runs
READ_PAGE = 1000
STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as SSE: `id: <seq>` of the runq event each came from, `data: <json>`",
        "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
    }
}


@router.post(
    "/ag-ui/{agent}",
    response_class=EventSourceResponse,
    responses={**STREAM_RESPONSE, **problems(400, 401, 404, 409, 413, 415, 422, 429, 503)},
)
async def run_agent(
    agent: Annotated[str, Path(min_length=1, max_length=200, description="The agent to run", examples=["demo"])],
    body: RunAgentInput,
    request: Request,
    caller: Runner,
    runtime: RuntimeDep,
    guard: UrlGuardDep,
) -> Response:
    """Run ``agent`` in the thread ``threadId`` names, answering with the run as AG-UI events.
    With ``resume`` entries, the thread's waiting run continues instead (409 ``not_waiting``
    when the interrupt is not the open one). Also with a thread token of that thread (scope
    ``run``, and ``resume`` for resume entries). The stream holds one of the tenant's stream
    slots (``429 too_many_streams`` past its ``max_streams``, and then nothing is started)."""
    return await runtime.presence.streaming(
        caller.tenant_id, lambda: _run_agent(agent, body, request, caller, runtime, guard)
    )


async def _run_agent(
    agent: str, body: RunAgentInput, request: Request, caller: Caller, runtime: Runtime, guard: UrlGuard
) -> Response:
    thread = await _thread(caller, body.threadId)
    if body.resume:
        if caller.grant is not None and "resume" not in caller.grant.scopes:
            raise ApiProblem(403, "insufficient_scope", "this token may not resume runs")
        run, after = await _resume(runtime, caller, thread, body.resume)
    else:
        run, after = await _start(runtime, caller, thread, agent, body, request, guard), 0
    segment = Segment(
        thread_id=body.threadId, client_run_id=body.runId, run_id=str(run.id), runq_thread_id=str(thread.id)
    )
    return await _stream(runtime, run, segment, after)


@router.get(
    "/ag-ui/runs/{run_id}/events",
    response_class=EventSourceResponse,
    responses={**STREAM_RESPONSE, **problems(400, 401, 404, 422, 429, 503)},
)
async def run_events(
    run_id: Annotated[
        str,
        Path(
            min_length=1,
            max_length=200,
            pattern=NO_NUL,
            description="runq's run id, or the `runId` the client sent",
        ),
    ],
    caller: Reader,
    runtime: RuntimeDep,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="resume after this seq (the frames' `id:`)")] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """The run as AG-UI events after the cursor, up to its end or its next wait. Also with a
    thread token of the run's thread, or a stream token of the run. The stream holds one of the
    tenant's stream slots."""
    return await runtime.presence.streaming(
        caller.tenant_id, lambda: _run_events(run_id, caller, runtime, event_cursor(after, last_event_id))
    )


async def _run_events(run_id: str, caller: Caller, runtime: Runtime, after: int) -> Response:
    run, client_run_id = await _find_run(caller, run_id)
    thread_id = str(run.thread_id) if run.thread_id else None
    name = thread_id or str(run.id)  # RUN_STARTED's threadId: the chat's own name when it has one
    if run.thread_id is not None:
        name = (await runtime.queue.get_thread(run.thread_id, tenant_id=caller.tenant_id)).chat_id or name
    segment = Segment(thread_id=name, client_run_id=client_run_id, run_id=str(run.id), runq_thread_id=thread_id)
    return await _stream(runtime, run, segment, after)


async def _thread(caller: Caller, name: str) -> Thread:
    """The tenant's thread ``threadId`` names: a runq thread id, or else the chat's own name
    for its thread, created on first use (the client's default threadId is a new UUID). A
    thread token reaches its own thread only."""
    if caller.grant is not None:
        thread = await caller.thread()
        if name not in (str(thread.id), thread.chat_id):
            raise caller.outside()
        return thread
    return await caller.runtime.queue.named_thread(name, tenant_id=caller.tenant_id, create=True)


async def _start(
    runtime: Runtime,
    caller: Caller,
    thread: Thread,
    agent: str,
    body: RunAgentInput,
    request: Request,
    guard: UrlGuardDep,
) -> Run:
    """A new run of the thread; a repeat of the ``runId`` finds the same run."""
    prompt = body.prompt()
    if prompt is None:
        raise ApiProblem(422, "no_user_message", "messages hold no user message to answer")
    forwarded = body.forwardedProps.input if body.forwardedProps else {}
    create = caller.run_body(CreateRun(agent=agent, input={**forwarded, "prompt": prompt}))
    key = f"{KEY_PREFIX}{body.runId}"
    new = await new_run(
        create, caller.principal, runtime, guard, key, traceparent=run_traceparent(request.headers.get("traceparent"))
    )
    digest = request_hash(create.model_dump(mode="json") | {"thread_id": str(thread.id)})
    run, created, _ = await runtime.queue.enqueue_in_thread(
        thread.id, dataclasses.replace(new, request_digest=digest), strategy=Strategy.ENQUEUE
    )
    if created:
        RUNS_CREATED.labels(agent=run.agent).inc()
    return run


def _resume_value(entry: ResumeEntry, waitpoint: dict[str, Any]) -> Any:
    """``resolved`` gives its payload; ``cancelled`` denies an approval, and tells any other
    wait ``{cancelled: true}``."""
    if entry.status == "resolved":
        return entry.payload
    return {"approved": False} if waitpoint.get("name") == "approval" else {"cancelled": True}


async def _resume(runtime: Runtime, caller: Caller, thread: Thread, entries: list[ResumeEntry]) -> tuple[Run, int]:
    """Resume the thread's waiting run; the stream starts at its ``run.resumed``. A repeat (the
    wait was answered already) streams from the same place."""
    if len(entries) != 1:
        raise ApiProblem(422, "one_interrupt", "a runq run waits for one interrupt at a time: send one resume entry")
    entry = entries[0]
    try:
        waitpoint_id = uuid.UUID(entry.interruptId)
    except ValueError as exc:
        raise NotWaiting(entry.interruptId) from exc
    waiting = await runtime.queue.list_thread_runs(thread.id, tenant_id=caller.tenant_id, status=Status.WAITING, limit=1)
    run = waiting[0][1] if waiting else None
    if run is not None and run.waitpoint and run.waitpoint.get("waitpoint_id") == str(waitpoint_id):
        try:
            resumed = await runtime.queue.resume(
                run.id,
                tenant_id=caller.tenant_id,
                value=redact_data(_resume_value(entry, run.waitpoint)),  # event data is stored redacted
                waitpoint_id=waitpoint_id,
            )
        except NotWaiting:
            pass  # a concurrent repeat won: stream what it started
        else:
            RESUMES.labels(outcome="value").inc()
            WAIT_SECONDS.observe(resumed.waited_s)
            return resumed.run, resumed.run.last_event_seq - 1
    answered = await _answered(runtime, caller, thread, waitpoint_id)
    if answered is None:
        RESUMES.labels(outcome="not_waiting").inc()
        raise NotWaiting(str(run.id if run else thread.id))
    return answered


async def _answered(
    runtime: Runtime, caller: Caller, thread: Thread, waitpoint_id: uuid.UUID
) -> tuple[Run, int] | None:
    """The thread's run whose wait ``waitpoint_id`` was resumed, and the seq before its ``run.resumed``."""
    recent = await runtime.queue.list_thread_runs(thread.id, tenant_id=caller.tenant_id, limit=REPEAT_SEARCH_RUNS)
    for _, run in recent:
        async for event in _events(runtime, run.id, until=run.last_event_seq):
            if event.type == "run.resumed" and event.data.get("waitpoint_id") == str(waitpoint_id):
                return run, event.seq - 1
    return None


async def _find_run(caller: Caller, run_id: str) -> tuple[Run, str]:
    """A run by runq's id, or by the ``runId`` the client started it with, and the ``runId`` its
    replay names (the client's, as the live stream did; runq's id for a run started elsewhere);
    for a thread token, a run of its thread only (401 otherwise, as for anything outside it)."""
    queue = caller.runtime.queue
    run: Run | None
    client_run_id = run_id
    try:
        run, key = await queue.get_run_with_key(uuid.UUID(run_id), tenant_id=caller.tenant_id)
        if key is not None and key.startswith(KEY_PREFIX):
            client_run_id = key.removeprefix(KEY_PREFIX)
    except (ValueError, RunNotFound):
        run = await queue.find_by_idempotency_key(tenant_id=caller.tenant_id, idempotency_key=f"{KEY_PREFIX}{run_id}")
    if caller.grant is not None and (run is None or run.thread_id != caller.grant.thread_id):
        raise caller.outside()
    if run is None:
        raise RunNotFound(run_id)
    return run, client_run_id


async def _events(runtime: Runtime, run_id: uuid.UUID, *, until: int) -> AsyncIterator[Any]:
    after = 0
    while after < until:
        page = await runtime.queue.read_events(run_id, after=after, limit=min(READ_PAGE, until - after))
        if not page:
            return
        for event in page:
            yield event
        after = page[-1].seq


async def _stream(runtime: Runtime, run: Run, segment: Segment, after: int) -> EventSourceResponse:
    if after:
        segment.catch_up([(e.seq, e.type, e.data) async for e in _events(runtime, run.id, until=after)])
    opening = frames(after, segment.prelude())

    async def body() -> AsyncIterator[bytes]:
        yield opening
        pages = follow_pages(
            run, after=after, hub=runtime.hub, presence=runtime.presence, poll_s=runtime.settings.poll_s
        )
        try:
            async for page in pages:
                yield translate_page(segment, page.events)
                if segment.ended:  # a wait ends this AG-UI run; the run itself goes on
                    return
        finally:
            await pages.aclose()

    return EventSourceResponse(body(), ping=runtime.sse_ping_s, sep="\n", send_timeout=SEND_TIMEOUT_S)
