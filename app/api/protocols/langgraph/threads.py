"""LangGraph's threads (DESIGN §17) are runq threads: same id, same tenant. Their status and
values come from the last run (runq's ``busy``, then how that run ended); their state, history
and updates from the graph's checkpoints through runq's saver."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status

from app.api.auth import Caller
from app.api.deps import Runtime, RuntimeDep
from app.api.params import parse_id
from app.api.problems import ApiProblem
from app.api.protocols.langgraph.auth import Reader, Runner, Tenant
from app.api.protocols.langgraph.run_ops import finished
from app.api.protocols.langgraph.schemas import (
    CheckpointId,
    ThreadCountRequest,
    ThreadCreate,
    ThreadHistoryRequest,
    ThreadId,
    ThreadPatch,
    ThreadSearchRequest,
    ThreadStateUpdate,
)
from app.api.protocols.langgraph.state import (
    EMPTY_STATE,
    thread_history,
    thread_state,
    update_state,
)
from app.api.protocols.langgraph.status import thread_status
from app.domain import Run, Thread
from app.errors import RunFinished, RunNotFound, ThreadBusy
from app.queue.graph_checkpoints import GraphCheckpoints

router = APIRouter()

SortColumn = Literal["created_at", "updated_at", "thread_id"]
# A sort_by as the column the SQL orders by: ``status`` is ordered after (a thread's status comes
# from its last run), on top of updated_at; ``state_updated_at`` is updated_at, as the reference
# gives it for a thread whose state has no time of its own.
SORT_COLUMNS: dict[str, SortColumn] = {
    "thread_id": "thread_id",
    "created_at": "created_at",
    "updated_at": "updated_at",
    "state_updated_at": "updated_at",
    "status": "updated_at",
}


async def last_run(runtime: Runtime, thread: Thread) -> Run | None:
    if thread.last_run_id is None:
        return None
    try:
        return await runtime.queue.get_run(thread.last_run_id, tenant_id=thread.tenant_id)
    except RunNotFound:  # purged by retention
        return None


async def thread_json(runtime: Runtime, thread: Thread) -> dict[str, Any]:
    """The thread as LangGraph shows it: its status from its runs, its values and open
    interrupts from its graph's latest checkpoint (also after an ``update_state``)."""
    last = await last_run(runtime, thread)
    try:
        state = await thread_state(runtime, thread)
    except ApiProblem:  # its graph is not served here: the thread is still shown
        state = EMPTY_STATE
    interrupts = {task["id"]: task["interrupts"] for task in state["tasks"] if task["interrupts"]}
    return {
        "thread_id": str(thread.id),
        "created_at": thread.created_at.isoformat(),
        "updated_at": thread.updated_at.isoformat(),
        "metadata": thread.metadata,
        "status": thread_status(thread, last),
        "values": state["values"] if state["checkpoint"] is not None else None,
        "interrupts": interrupts,
        "config": {},
        "error": None,
    }


@router.post("/threads")
async def create_thread(caller: Tenant, runtime: RuntimeDep, body: ThreadCreate) -> dict[str, Any]:
    """A thread, with the id the client chose if any: 409 when it is taken, unless
    ``if_exists: do_nothing`` (then the tenant's thread of that id)."""
    queue = runtime.queue
    if body.thread_id is None:
        thread, _ = await queue.create_thread(tenant_id=caller.tenant_id, metadata=body.metadata)
        return await thread_json(runtime, thread)
    created = await queue.create_thread_with_id(
        body.thread_id, tenant_id=caller.tenant_id, metadata=body.metadata
    )
    if created is not None:
        return await thread_json(runtime, created)
    if body.if_exists == "do_nothing":
        return await thread_json(
            runtime, await queue.get_thread(body.thread_id, tenant_id=caller.tenant_id)
        )
    raise ApiProblem(409, "thread_exists", f"thread {body.thread_id} already exists")


async def _search(
    runtime: Runtime,
    caller: Caller,
    body: ThreadCountRequest,
    *,
    limit: int,
    offset: int,
    ids: list[uuid.UUID] | None = None,
    sort_by: SortColumn = "updated_at",
    descending: bool = True,
) -> list[dict[str, Any]]:
    """Threads whose metadata matches (in SQL), then status and values (on their last run)."""
    found = await runtime.queue.search_threads(
        tenant_id=caller.tenant_id,
        metadata=body.metadata,
        ids=ids,
        sort_by=sort_by,
        descending=descending,
        limit=limit,
        offset=offset,
    )
    threads = [await thread_json(runtime, t) for t in found]
    return [
        t
        for t in threads
        if (body.status is None or t["status"] == body.status)
        and (body.values is None or body.values.items() <= (t["values"] or {}).items())
    ]


@router.post("/threads/search")
async def search_threads(
    caller: Tenant, runtime: RuntimeDep, body: ThreadSearchRequest
) -> list[dict[str, Any]]:
    """A page of the tenant's threads. Sorted in SQL, except by ``status`` (a thread's status
    comes from its last run): then, as with a ``status`` or ``values`` filter, every matching
    thread is read and the page cut from them."""
    # As the reference: no sort_by is updated_at, newest first, whatever sort_order says.
    descending = body.sort_by is None or body.sort_order != "asc"
    column = SORT_COLUMNS[body.sort_by or "updated_at"]
    in_python = body.status is not None or body.values is not None or body.sort_by == "status"
    found = await _search(
        runtime,
        caller,
        body,
        limit=10_000 if in_python else body.limit,
        offset=0 if in_python else body.offset,
        ids=body.ids,
        sort_by=column,
        descending=descending,
    )
    if body.sort_by == "status":  # stable: threads of one status stay by updated_at
        found.sort(key=lambda t: str(t["status"]), reverse=descending)
    page = found[body.offset : body.offset + body.limit] if in_python else found
    if body.select:
        return [{k: v for k, v in t.items() if k in body.select} for t in page]
    return page


@router.post("/threads/count")
async def count_threads(caller: Tenant, runtime: RuntimeDep, body: ThreadCountRequest) -> int:
    return len(await _search(runtime, caller, body, limit=10_000, offset=0))


@router.get("/threads/{thread_id}")
async def get_thread(caller: Reader, runtime: RuntimeDep, thread_id: ThreadId) -> dict[str, Any]:
    return await thread_json(runtime, await caller.thread())


@router.patch("/threads/{thread_id}")
async def patch_thread(
    caller: Runner, runtime: RuntimeDep, thread_id: ThreadId, body: ThreadPatch
) -> dict[str, Any]:
    thread = await runtime.queue.merge_thread_metadata(
        caller.thread_id(), tenant_id=caller.tenant_id, metadata=body.metadata
    )
    return await thread_json(runtime, thread)


@router.delete(
    "/threads/{thread_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def delete_thread(caller: Tenant, runtime: RuntimeDep, thread_id: ThreadId) -> Response:
    """The thread, its runs and its graph's checkpoints (runq's delete); a busy thread's runs are cancelled
    first, as the reference does (runq's own ``DELETE /threads/{id}`` answers 409 instead)."""
    thread = await caller.thread()
    try:
        await runtime.queue.delete_thread(thread.id, tenant_id=caller.tenant_id)
    except ThreadBusy:
        await _stop_runs(runtime, thread)
        await runtime.queue.delete_thread(
            thread.id, tenant_id=caller.tenant_id
        )  # 409 if one came since
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _stop_runs(runtime: Runtime, thread: Thread) -> None:
    """Cancel the thread's runs in flight and wait for each to end (a leased one ends in its
    worker, which writes its last events first)."""
    found = await runtime.queue.list_thread_runs(thread.id, tenant_id=thread.tenant_id, limit=1000)
    for _, run in found:
        if run.is_terminal:
            continue
        try:
            stopping = await runtime.queue.request_cancel(
                run.id, tenant_id=thread.tenant_id, reason="interrupted"
            )
        except RunFinished:
            continue
        await finished(runtime, stopping)


@router.post("/threads/{thread_id}/copy")
async def copy_thread(caller: Tenant, runtime: RuntimeDep, thread_id: ThreadId) -> dict[str, Any]:
    """A new thread with the same metadata and the graph's checkpoints (not the runs)."""
    source = await caller.thread()
    copy, _ = await runtime.queue.create_thread(
        tenant_id=caller.tenant_id, metadata=source.metadata
    )
    await GraphCheckpoints(runtime.engine).copy_thread(source=str(source.id), target=str(copy.id))
    return await thread_json(runtime, copy)


@router.get("/threads/{thread_id}/state")
async def get_state(
    caller: Reader, runtime: RuntimeDep, thread_id: ThreadId, subgraphs: bool = False
) -> dict[str, Any]:
    return await thread_state(runtime, await caller.thread())


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(
    caller: Reader, runtime: RuntimeDep, thread_id: ThreadId, checkpoint_id: CheckpointId
) -> dict[str, Any]:
    checkpoint = {"checkpoint_id": str(parse_id(checkpoint_id, "checkpoint"))}
    return await thread_state(runtime, await caller.thread(), checkpoint)


@router.post("/threads/{thread_id}/state")
async def post_state(
    caller: Runner, runtime: RuntimeDep, thread_id: ThreadId, body: ThreadStateUpdate
) -> dict[str, Any]:
    """``update_state``; 409 while a run of the thread is in flight (it would race the run's
    fenced writes)."""
    thread = await caller.thread()
    if thread.busy:
        raise ThreadBusy(str(thread.id))
    checkpoint = body.checkpoint or (
        {"checkpoint_id": body.checkpoint_id} if body.checkpoint_id else None
    )
    return await update_state(
        runtime, thread, values=body.values, as_node=body.as_node, checkpoint=checkpoint
    )


@router.get("/threads/{thread_id}/history")
async def get_history(
    caller: Reader,
    runtime: RuntimeDep,
    thread_id: ThreadId,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    before: str | None = None,
) -> list[dict[str, Any]]:
    return await thread_history(
        runtime, await caller.thread(), limit=limit, before=before, metadata=None, checkpoint=None
    )


@router.post("/threads/{thread_id}/history")
async def post_history(
    caller: Reader, runtime: RuntimeDep, thread_id: ThreadId, body: ThreadHistoryRequest
) -> list[dict[str, Any]]:
    return await thread_history(
        runtime,
        await caller.thread(),
        limit=body.limit,
        before=body.before,
        metadata=body.metadata,
        checkpoint=body.checkpoint,
    )
