"""LangGraph's runs (DESIGN §17) are runq runs: background, streamed or waited for, in a thread
or on their own; listed, joined, their stream resumed from any ``Last-Event-ID``, cancelled."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import JSONResponse

from app.api.deps import RuntimeDep
from app.api.params import parse_id
from app.api.protocols.langgraph.auth import Canceller, Reader, Runner, Tenant
from app.api.protocols.langgraph.run_ops import (
    SSE_ANSWER,
    create_run,
    final_values,
    finished,
    run_json,
    run_path,
    stream_response,
    visible_run,
)
from app.api.protocols.langgraph.schemas import RUN_ID, RunCreate, RunId, ThreadId
from app.api.protocols.langgraph.status import rolled_back, run_status
from app.api.runs import event_cursor
from app.api.webhooks import UrlGuardDep
from app.errors import RunFinished, RunNotFound

router = APIRouter()

LastEventId = Annotated[str | None, Header(max_length=20)]


def _thread(thread_id: ThreadId) -> uuid.UUID:
    return parse_id(thread_id, "thread")


@router.post("/threads/{thread_id}/runs")
async def create_thread_run(
    caller: Runner,
    runtime: RuntimeDep,
    guard: UrlGuardDep,
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
) -> JSONResponse:
    run = await create_run(caller, runtime, guard, request, body, caller.thread_id())
    return JSONResponse(run_json(run), headers={"Content-Location": run_path(run)})


@router.post("/threads/{thread_id}/runs/stream", responses=SSE_ANSWER)
async def stream_thread_run(
    caller: Runner,
    runtime: RuntimeDep,
    guard: UrlGuardDep,
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
) -> Response:
    run = await create_run(caller, runtime, guard, request, body, caller.thread_id())
    return stream_response(runtime, run)


@router.post("/threads/{thread_id}/runs/wait")
async def wait_thread_run(
    caller: Runner,
    runtime: RuntimeDep,
    guard: UrlGuardDep,
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
) -> JSONResponse:
    run = await create_run(caller, runtime, guard, request, body, caller.thread_id())
    done = await finished(runtime, run)
    return JSONResponse(final_values(done), headers={"Content-Location": f"{run_path(run)}/join"})


@router.post("/runs")
async def create_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> dict[str, Any]:
    return run_json(await create_run(caller, runtime, guard, request, body, None))


@router.post("/runs/stream", responses=SSE_ANSWER)
async def stream_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> Response:
    run = await create_run(caller, runtime, guard, request, body, None)
    return stream_response(runtime, run, location=False)


@router.post("/runs/wait")
async def wait_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> Any:
    run = await create_run(caller, runtime, guard, request, body, None)
    return final_values(await finished(runtime, run))


@router.post("/runs/batch")
async def batch_runs(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: list[RunCreate]
) -> list[dict[str, Any]]:
    return [run_json(await create_run(caller, runtime, guard, request, one, None)) for one in body]


@router.get("/threads/{thread_id}/runs")
async def list_thread_runs(
    caller: Reader,
    runtime: RuntimeDep,
    thread_id: ThreadId,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: Literal["pending", "running", "success", "error", "timeout", "interrupted"]
    | None = None,
) -> list[dict[str, Any]]:
    """The thread's runs, newest first, without rolled-back ones."""
    thread = await caller.thread()
    found = await runtime.queue.list_thread_runs(
        thread.id, tenant_id=caller.tenant_id, limit=offset + limit + 100
    )
    runs = [
        run
        for _, run in found
        if not rolled_back(run) and (status is None or run_status(run) == status)
    ]
    return [run_json(run) for run in runs[offset : offset + limit]]


@router.get(f"/threads/{{thread_id}}/runs/{RUN_ID}")
async def get_thread_run(caller: Reader, thread_id: ThreadId, run_id: RunId) -> dict[str, Any]:
    return run_json(await visible_run(caller, caller.thread_id(), parse_id(run_id, "run")))


@router.get(f"/threads/{{thread_id}}/runs/{RUN_ID}/join")
async def join_run(caller: Reader, runtime: RuntimeDep, thread_id: ThreadId, run_id: RunId) -> Any:
    run = await visible_run(caller, caller.thread_id(), parse_id(run_id, "run"))
    return final_values(await finished(runtime, run))


@router.get(f"/threads/{{thread_id}}/runs/{RUN_ID}/stream", responses=SSE_ANSWER)
async def join_stream(
    caller: Reader,
    runtime: RuntimeDep,
    thread_id: ThreadId,
    run_id: RunId,
    last_event_id: LastEventId = None,
) -> Response:
    """The run's frames after ``Last-Event-ID`` (``-1`` or none: from the start), whether or
    not it was created ``stream_resumable``, for as long as its history is kept."""
    run = await visible_run(caller, caller.thread_id(), parse_id(run_id, "run"))
    after = 0 if last_event_id in (None, "-1") else event_cursor(0, last_event_id)
    return stream_response(runtime, run, after=after)


@router.post(
    f"/threads/{{thread_id}}/runs/{RUN_ID}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,
    responses={202: {"description": "Asked to stop (with `wait`: stopped); no body"}},
)
async def cancel_run(
    caller: Canceller,
    runtime: RuntimeDep,
    thread_id: ThreadId,
    run_id: RunId,
    wait: bool = False,
    action: Literal["interrupt", "rollback"] = "interrupt",
) -> Response:
    """Stop the run (``rollback`` also removes its thread messages, as that strategy does);
    404 for a run that already finished, as the reference answers."""
    run = await visible_run(caller, caller.thread_id(), parse_id(run_id, "run"))
    reason = "rolled_back" if action == "rollback" else "interrupted"
    try:
        stopping = await runtime.queue.request_cancel(
            run.id, tenant_id=caller.tenant_id, reason=reason
        )
    except RunFinished:
        raise RunNotFound(str(run.id)) from None
    if wait:
        await finished(runtime, stopping)
    return Response(status_code=status.HTTP_202_ACCEPTED)
