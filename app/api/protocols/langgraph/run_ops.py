"""What LangGraph's run routes share: creating a runq run from a LangGraph body, the run as
LangGraph shows it, waiting for its end, and streaming its frames from runq's event log."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from typing import Any, Literal

from fastapi import Request
from sse_starlette import EventSourceResponse

from app.api.auth import Caller
from app.api.deps import Runtime
from app.api.protocols.langgraph.frames import encode_frames
from app.api.protocols.langgraph.graphs import merged, resolve
from app.api.protocols.langgraph.schemas import RunCreate, runq_webhook
from app.api.protocols.langgraph.status import rolled_back, run_status
from app.api.runs import SSE_MEDIA_TYPE, new_run
from app.api.schemas import CreateRun as RunqRun  # runq's own
from app.api.stream import SEND_TIMEOUT_S, follow_pages
from app.api.webhooks import UrlGuard
from app.domain import Run, Strategy
from app.errors import RunFinished, RunNotFound
from app.metrics import RUNS_CREATED, count_ending
from app.tracing import run_traceparent


async def create_run(
    caller: Caller,
    runtime: Runtime,
    guard: UrlGuard,
    request: Request,
    body: RunCreate,
    thread_id: uuid.UUID | None,
) -> Run:
    """A runq run of the assistant's graph, in the thread (after its multitask strategy dealt
    with the runs in flight: the thread-token scope check is runq's own) or on its own."""
    if thread_id is not None and not (body.if_not_exists == "create" and caller.grant is None):
        await caller.thread()  # 404 before anything about the body
    found = await resolve(runtime, caller.tenant_id, body.assistant_id, status=422)
    graph_id = found.graph_id
    # The run and thread name the assistant by its UUID, whichever id (or the graph's) came;
    # the assistant's config and context lie under the run's own, as LangGraph's server merges.
    body = body.model_copy(update={"assistant_id": str(found.assistant_id), **merged(found, body)})
    # Only the fields the request set, so a thread token's refusals (``delay_s``, ``webhook``)
    # see what it asked.
    fields: dict[str, Any] = {"delay_s": body.after_seconds} if body.after_seconds else {}
    if body.on_disconnect is not None:
        fields["on_disconnect"] = body.on_disconnect
    if body.webhook is not None:
        fields["webhook"] = runq_webhook(body.webhook)
    runq_body = RunqRun(agent=graph_id, input=body.run_input(), **fields)
    runq_body = caller.run_body(runq_body)
    new = await new_run(
        runq_body,
        caller.principal,
        runtime,
        guard,
        request.headers.get("idempotency-key"),
        traceparent=run_traceparent(request.headers.get("traceparent")),
    )
    queue = runtime.queue
    if thread_id is None:
        run, created = await queue.enqueue(new)
    else:
        strategy = caller.strategy(body.multitask_strategy)
        if body.if_not_exists == "create" and caller.grant is None:
            await queue.create_thread_with_id(thread_id, tenant_id=caller.tenant_id, metadata={})
        # LangGraph's server names the thread's graph in its metadata; its state routes read it.
        await queue.merge_thread_metadata(
            thread_id,
            tenant_id=caller.tenant_id,
            metadata={"graph_id": graph_id, "assistant_id": body.assistant_id},
        )
        run, created, cancelled = await queue.enqueue_in_thread(thread_id, new, strategy=strategy)
        for stopped in cancelled:
            count_ending(stopped)
    if created:
        RUNS_CREATED.labels(agent=run.agent).inc()
    return run


async def stop_runs(
    runtime: Runtime, tenant_id: str, runs: Sequence[Run], action: Literal["interrupt", "rollback"]
) -> list[Run]:
    """Cancel runs as LangGraph's cancel does: a thread's runs as its multitask strategies stop
    runs in flight (``rollback`` takes back their messages and graph state), a run of no thread
    as runq's Stop. The runs cancelled or asked to stop."""
    strategy = Strategy.ROLLBACK if action == "rollback" else Strategy.INTERRUPT
    stopped: list[Run] = []
    in_threads: defaultdict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for run in runs:
        if run.thread_id is not None:
            in_threads[run.thread_id].append(run.id)
            continue
        with suppress(RunFinished):
            stopped.append(
                await runtime.queue.request_cancel(
                    run.id, tenant_id=tenant_id, reason="interrupted"
                )
            )
    for thread_id, run_ids in in_threads.items():
        stopped += await runtime.queue.stop_thread_runs(
            thread_id, run_ids, tenant_id=tenant_id, strategy=strategy
        )
    for run in stopped:
        count_ending(run)  # cancelled now if it was pending; a leased run is ended by its worker
    return stopped


def run_json(run: Run) -> dict[str, Any]:
    kwargs = dict(run.input)
    return {
        "run_id": str(run.id),
        "thread_id": None if run.thread_id is None else str(run.thread_id),
        "assistant_id": kwargs.pop("assistant_id", None),
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
        "status": run_status(run),
        "metadata": kwargs.pop("metadata", {}),
        "multitask_strategy": kwargs.pop("multitask_strategy", None),
        "kwargs": kwargs,
    }


async def visible_run(caller: Caller, thread_id: uuid.UUID, run_id: uuid.UUID) -> Run:
    """The thread's run as these routes see it: a rolled-back run is gone (404)."""
    run = await caller.found_run(run_id)
    if run.thread_id != thread_id or rolled_back(run):
        raise RunNotFound(str(run_id))
    return run


def run_path(run: Run) -> str:
    """The run's path relative to the API root (the SDKs prepend their base URL)."""
    if run.thread_id is None:
        return f"/runs/{run.id}"
    return f"/threads/{run.thread_id}/runs/{run.id}"


async def finished(runtime: Runtime, run: Run) -> Run:
    """The run once it is terminal (followed through the event log, woken by NOTIFY)."""
    pages = follow_pages(
        run,
        after=run.last_event_seq,
        hub=runtime.hub,
        presence=runtime.presence,
        poll_s=runtime.settings.poll_s,
    )
    try:
        async for _ in pages:
            pass
    finally:
        await pages.aclose()
    return await runtime.queue.get_run(run.id, tenant_id=run.tenant_id)


def final_values(run: Run) -> Any:
    """What ``runs.wait`` and ``join`` answer: the final values, open interrupts under
    ``__interrupt__``, or ``__error__`` for a run that failed."""
    if run_status(run) in ("error", "timeout"):
        return {"__error__": {"error": run.error_code or "error", "message": run.error_message}}
    output = run.output if isinstance(run.output, dict) else {}
    values = output.get("values", {})
    interrupts = [i for found in (output.get("interrupts") or {}).values() for i in found]
    if interrupts and isinstance(values, dict):
        return values | {"__interrupt__": interrupts}
    return values


# The OpenAPI answer of a route that streams LangGraph's frames.
SSE_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "LangGraph's SSE frames (`id: <seq>`, `event: <mode>`, `data: <json>`)",
        "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
    }
}


def stream_response(runtime: Runtime, run: Run, *, after: int = 0) -> EventSourceResponse:
    """The run's frames after seq ``after`` until it ends; ``Location`` says where to join."""

    async def body() -> AsyncIterator[bytes]:
        pages = follow_pages(
            run,
            after=after,
            hub=runtime.hub,
            presence=runtime.presence,
            poll_s=runtime.settings.poll_s,
        )
        try:
            async for page in pages:
                frames = encode_frames(run.id, page.events)
                if frames:
                    yield frames
        finally:
            await pages.aclose()

    headers = {"Location": f"{run_path(run)}/stream", "Content-Location": run_path(run)}
    return EventSourceResponse(
        body(), ping=runtime.sse_ping_s, send_timeout=SEND_TIMEOUT_S, headers=headers
    )
