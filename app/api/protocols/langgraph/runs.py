"""LangGraph's runs (DESIGN §17) are runq runs: background, streamed or waited for, in a thread
or on their own; listed, joined, their stream resumed from any ``Last-Event-ID``, cancelled."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import JSONResponse

from app.api.deps import RuntimeDep
from app.api.params import parse_id
from app.api.problems import ApiProblem
from app.api.protocols.langgraph.auth import Canceller, Reader, Runner, Tenant
from app.api.protocols.langgraph.graphs import assistants
from app.api.protocols.langgraph.run_ops import (
    SSE_ANSWER,
    create_run,
    final_values,
    finished,
    run_json,
    run_path,
    stop_runs,
    stream_response,
    visible_run,
)
from app.api.protocols.langgraph.schemas import (
    RUN_ID,
    CancelAction,
    RunCreate,
    RunId,
    RunsCancel,
    ThreadId,
    ThreadRunCreate,
)
from app.api.protocols.langgraph.status import rolled_back, run_status
from app.api.runs import event_cursor
from app.api.webhooks import UrlGuardDep
from app.domain import Run, Status
from app.errors import RunNotFound

router = APIRouter()

# The runq status of each status ``POST /runs/cancel`` names.
CANCELLABLE = {"pending": Status.PENDING, "running": Status.LEASED}
LastEventId = Annotated[str | None, Header(max_length=20)]


def _wait_headers(run: Run) -> dict[str, str]:
    """Where a waited run's answer can be had again (``join``), and the run itself."""
    return {"Location": f"{run_path(run)}/join", "Content-Location": run_path(run)}


@router.post("/threads/{thread_id}/runs")
async def create_thread_run(
    caller: Runner,
    runtime: RuntimeDep,
    guard: UrlGuardDep,
    request: Request,
    thread_id: ThreadId,
    body: ThreadRunCreate,
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
    body: ThreadRunCreate,
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
    body: ThreadRunCreate,
) -> JSONResponse:
    run = await create_run(caller, runtime, guard, request, body, caller.thread_id())
    done = await finished(runtime, run)
    return JSONResponse(final_values(done), headers=_wait_headers(run))


@router.post("/runs")
async def create_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> JSONResponse:
    run = await create_run(caller, runtime, guard, request, body, None)
    return JSONResponse(run_json(run), headers={"Content-Location": run_path(run)})


@router.post("/runs/stream", responses=SSE_ANSWER)
async def stream_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> Response:
    run = await create_run(caller, runtime, guard, request, body, None)
    return stream_response(runtime, run)


@router.post("/runs/wait")
async def wait_stateless_run(
    caller: Tenant, runtime: RuntimeDep, guard: UrlGuardDep, request: Request, body: RunCreate
) -> JSONResponse:
    run = await create_run(caller, runtime, guard, request, body, None)
    return JSONResponse(final_values(await finished(runtime, run)), headers=_wait_headers(run))


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
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
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


@router.delete(
    f"/threads/{{thread_id}}/runs/{RUN_ID}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={204: {"description": "Deleted"}},
)
async def delete_run(
    caller: Tenant, runtime: RuntimeDep, thread_id: ThreadId, run_id: RunId
) -> Response:
    """A finished run, with its events and the graph checkpoints it wrote (as the reference);
    409 ``run_in_flight`` while it is not finished (cancel it first). Its messages stay."""
    run = await visible_run(caller, caller.thread_id(), parse_id(run_id, "run"))
    if not await runtime.queue.delete_finished_run(run.id, tenant_id=caller.tenant_id):
        raise ApiProblem(
            409, "run_in_flight", "the run is still in flight: cancel it, then delete it"
        )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(f"/runs/{RUN_ID}/stream", responses=SSE_ANSWER)
async def join_stateless_stream(
    caller: Tenant, runtime: RuntimeDep, run_id: RunId, last_event_id: LastEventId = None
) -> Response:
    """A run of no thread's frames after ``Last-Event-ID``, where its stream's ``Location`` points."""
    run = await caller.found_run(parse_id(run_id, "run"))
    if run.thread_id is not None:
        raise RunNotFound(str(run.id))
    return stream_response(runtime, run, after=_after(last_event_id))


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
    return stream_response(runtime, run, after=_after(last_event_id))


def _after(last_event_id: str | None) -> int:
    """``Last-Event-ID`` as runq's cursor; none or ``-1``: from the start."""
    return 0 if last_event_id in (None, "-1") else event_cursor(0, last_event_id)


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
    action: CancelAction = "interrupt",
) -> Response:
    """Stop the run (``rollback`` also takes back its messages and graph state, and the run is
    gone from these routes); 404 for a run that already finished, as the reference answers."""
    run = await visible_run(caller, caller.thread_id(), parse_id(run_id, "run"))
    if run.is_terminal:
        raise RunNotFound(str(run.id))
    for stopping in await stop_runs(runtime, caller.tenant_id, [run], action):
        if wait:
            await finished(runtime, stopping)
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/runs/cancel",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={204: {"description": "The runs are cancelled or asked to stop"}},
)
async def cancel_runs(
    caller: Tenant, runtime: RuntimeDep, body: RunsCancel, action: CancelAction = "interrupt"
) -> Response:
    """Stop many runs: the ones named (of the thread, if one is named), or the tenant's graph
    runs in a status (``pending``, ``running`` or ``all``)."""
    if body.run_ids:
        runs = [await caller.found_run(run_id) for run_id in body.run_ids]
        if body.thread_id is not None and any(r.thread_id != body.thread_id for r in runs):
            raise RunNotFound(str(body.thread_id))
    elif body.status is None:
        raise ApiProblem(422, "validation_error", "name the runs (run_ids) or a status")
    else:
        graphs = {a.graph_id for a in assistants(runtime)}
        wanted = list(CANCELLABLE.values()) if body.status == "all" else [CANCELLABLE[body.status]]
        runs = [
            run
            for status_ in wanted
            for run in await runtime.queue.list_runs(
                tenant_id=caller.tenant_id, status=status_, limit=1000
            )
            if run.agent in graphs and (body.thread_id is None or run.thread_id == body.thread_id)
        ]
    await stop_runs(runtime, caller.tenant_id, [r for r in runs if not r.is_terminal], action)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
