"""Thread routes (docs/threads.md): conversations whose runs execute one at a time, in order,
and what a new run does to the runs still in flight (``multitask_strategy``)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status

from app.api.auth import Tenant
from app.api.deps import RuntimeDep
from app.api.params import decode_cursor, encode_cursor, parse_id
from app.api.problems import ApiProblem, created_responses, problems
from app.api.runs import new_run
from app.api.schemas import (
    MAX_MESSAGE_CHARS,
    CreateThread,
    CreateThreadRun,
    MessageOut,
    MessagePage,
    RunOut,
    RunPage,
    ThreadOut,
    ThreadPage,
)
from app.api.webhooks import UrlGuardDep
from app.domain import Status, Strategy
from app.metrics import RUNS_CREATED, count_ending
from app.queue import request_hash
from app.tracing import run_traceparent

router = APIRouter(tags=["threads"])

Limit = Annotated[int, Query(ge=1, le=200)]
Cursor = Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page")]
IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=255, description="Repeats with the same key return the same object"),
]


async def parse_thread_id(
    thread_id: Annotated[
        str,
        Path(
            description="The thread's id (a UUID)",
            examples=["5d1e0c7a-3f4b-4c2a-9e8d-1a2b3c4d5e6f"],
            json_schema_extra={"format": "uuid"},
        ),
    ],
) -> uuid.UUID:
    return parse_id(thread_id, "thread")


ThreadIdPath = Annotated[uuid.UUID, Depends(parse_thread_id)]


@router.post(
    "/threads",
    status_code=status.HTTP_201_CREATED,
    response_model=ThreadOut,
    responses=created_responses(ThreadOut, 400, 401, 409, 413, 422, 503),
)
async def create_thread(
    principal: Tenant,
    runtime: RuntimeDep,
    response: Response,
    body: CreateThread | None = None,
    idempotency_key: IdempotencyKey = None,
) -> ThreadOut:
    """A new, empty conversation."""
    body = body or CreateThread()
    thread, created = await runtime.queue.create_thread(
        tenant_id=principal.tenant_id,
        metadata=body.metadata,
        idempotency_key=idempotency_key,
        request_digest=request_hash(body.model_dump(mode="json")) if idempotency_key else None,
    )
    if not created:
        response.status_code = status.HTTP_200_OK
    return ThreadOut.of(thread)


@router.get("/threads", response_model=ThreadPage, responses=problems(400, 401, 422, 503))
async def list_threads(principal: Tenant, runtime: RuntimeDep, limit: Limit = 50, cursor: Cursor = None) -> ThreadPage:
    """The tenant's threads, newest first."""
    found = await runtime.queue.list_threads(
        tenant_id=principal.tenant_id, limit=limit + 1, before=decode_cursor(cursor) if cursor else None
    )
    page = found[:limit]
    return ThreadPage(
        items=[ThreadOut.of(t) for t in page],
        next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if len(found) > limit else None,
    )


@router.get("/threads/{thread_id}", response_model=ThreadOut, responses=problems(401, 404, 422, 503))
async def get_thread(principal: Tenant, thread_id: ThreadIdPath, runtime: RuntimeDep) -> ThreadOut:
    return ThreadOut.of(await runtime.queue.get_thread(thread_id, tenant_id=principal.tenant_id))


def _position(cursor: str | None) -> int | None:
    """Messages and a thread's runs page by position (an index, a turn): the cursor is that
    number as text."""
    if cursor is None:
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out")
    return int(cursor)


@router.get(
    "/threads/{thread_id}/messages", response_model=MessagePage, responses=problems(400, 401, 404, 422, 503)
)
async def thread_messages(
    principal: Tenant,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Cursor = None,
) -> MessagePage:
    """The conversation, oldest first; ``index`` counts from 0 without gaps."""
    found = await runtime.queue.thread_messages(
        thread_id, tenant_id=principal.tenant_id, after=_position(cursor) or -1, limit=limit + 1
    )
    page = found[:limit]
    return MessagePage(
        items=[MessageOut.of(m) for m in page],
        next_cursor=str(page[-1].index) if len(found) > limit else None,
    )


@router.get("/threads/{thread_id}/runs", response_model=RunPage, responses=problems(400, 401, 404, 422, 503))
async def thread_runs(
    principal: Tenant,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    status: Status | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> RunPage:
    """The thread's runs, newest (latest turn) first."""
    found = await runtime.queue.list_thread_runs(
        thread_id, tenant_id=principal.tenant_id, status=status, limit=limit + 1, before_turn=_position(cursor)
    )
    page = found[:limit]
    return RunPage(
        items=[RunOut.of(run) for _, run in page],
        next_cursor=str(page[-1][0]) if len(found) > limit else None,
    )


def _check_message_sizes(body: CreateThreadRun) -> None:
    """The new input becomes history that every later run of the thread sends again: a prompt
    or message over ``MAX_MESSAGE_CHARS`` is refused here rather than stored."""
    texts = [body.input.get("prompt")]
    messages = body.input.get("messages")
    if isinstance(messages, list):
        texts += [m.get("content") for m in messages if isinstance(m, dict)]
    for text in texts:
        if isinstance(text, str) and len(text) > MAX_MESSAGE_CHARS:
            raise ApiProblem(
                422, "message_too_large", f"a thread message may hold at most {MAX_MESSAGE_CHARS} characters"
            )


@router.post(
    "/threads/{thread_id}/runs",
    status_code=status.HTTP_201_CREATED,
    response_model=RunOut,
    responses=created_responses(RunOut, 400, 401, 404, 409, 413, 422, 503),
)
async def create_thread_run(
    body: CreateThreadRun,
    http_request: Request,
    principal: Tenant,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    response: Response,
    guard: UrlGuardDep,
    idempotency_key: IdempotencyKey = None,
) -> RunOut:
    """The conversation's next run. It starts once every earlier run of the thread has ended;
    ``multitask_strategy`` says what happens to those still in flight (409 ``thread_busy`` for
    ``reject``)."""
    _check_message_sizes(body)
    new = await new_run(
        body, principal, runtime, guard, idempotency_key,
        traceparent=run_traceparent(http_request.headers.get("traceparent")),
    )
    run, created, cancelled = await runtime.queue.enqueue_in_thread(
        thread_id, new, strategy=Strategy(body.multitask_strategy)
    )
    for stopped in cancelled:  # pending runs a strategy cancelled now; leased ones end in their worker
        count_ending(stopped)
    if created:
        RUNS_CREATED.labels(agent=run.agent).inc()
    else:
        response.status_code = status.HTTP_200_OK
    return RunOut.of(run)


@router.delete(
    "/threads/{thread_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problems(401, 404, 409, 422, 503),
)
async def delete_thread(principal: Tenant, thread_id: ThreadIdPath, runtime: RuntimeDep) -> Response:
    """Delete the thread with its messages and runs; 409 ``thread_busy`` while a run of it is in flight."""
    await runtime.queue.delete_thread(thread_id, tenant_id=principal.tenant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
