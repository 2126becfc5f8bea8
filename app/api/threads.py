"""Thread routes (docs/threads.md): conversations whose runs execute one at a time, in order,
and what a new run does to the runs still in flight (``multitask_strategy``)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response, status

from app.api.auth import Reader, Runner, Tenant
from app.api.deps import RuntimeDep
from app.api.params import Cursor, Limit, decode_cursor, keyset_cursor, page_of, parse_id, uuid_path
from app.api.problems import ApiProblem, created_responses, problems
from app.api.runs import new_run
from app.api.schemas import RunOut, RunPage
from app.api.thread_schemas import (
    MAX_MESSAGE_CHARS,
    CreateThread,
    CreateThreadRun,
    MessageOut,
    MessagePage,
    ThreadOut,
    ThreadPage,
    ThreadToken,
    ThreadTokenRequest,
)
from app.api.tokens import issue_thread_token
from app.api.webhooks import UrlGuardDep
from app.domain import Status
from app.metrics import RUNS_CREATED, count_ending
from app.queue import request_hash
from app.tracing import run_traceparent

router = APIRouter(tags=["threads"])

IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=255, description="Repeats with the same key return the same object"),
]


async def parse_thread_id(
    thread_id: Annotated[str, uuid_path("The thread's id (a UUID)", "5d1e0c7a-3f4b-4c2a-9e8d-1a2b3c4d5e6f")],
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
    """A new, empty conversation; 409 `chat_id_conflict` when another thread has its `chat_id`."""
    body = body or CreateThread()
    thread, created = await runtime.queue.create_thread(
        tenant_id=principal.tenant_id,
        metadata=body.metadata,
        chat_id=body.chat_id,
        idempotency_key=idempotency_key,
        # without unset fields, so a repeat of a request from before chat ids has the same digest
        request_digest=request_hash(body.model_dump(mode="json", exclude_none=True)) if idempotency_key else None,
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
    page, next_cursor = page_of(found, limit, keyset_cursor)
    return ThreadPage(items=[ThreadOut.of(t) for t in page], next_cursor=next_cursor)


@router.get("/threads/{thread_id}", response_model=ThreadOut, responses=problems(401, 403, 404, 422, 503))
async def get_thread(caller: Reader, thread_id: ThreadIdPath) -> ThreadOut:
    """The thread; also with a thread token of it (`read`)."""
    return ThreadOut.of(await caller.thread())


def _position(cursor: str | None) -> int | None:
    """Messages and a thread's runs page by position (an index, a turn): the cursor is that
    number as text."""
    if cursor is None:
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out")
    return int(cursor)


@router.get(
    "/threads/{thread_id}/messages", response_model=MessagePage, responses=problems(400, 401, 403, 404, 422, 503)
)
async def thread_messages(
    caller: Reader,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Cursor = None,
) -> MessagePage:
    """The conversation, oldest first; ``index`` counts from 0 without gaps."""
    found = await runtime.queue.thread_messages(
        thread_id, tenant_id=caller.tenant_id, after=_position(cursor) or -1, limit=limit + 1
    )
    page, next_cursor = page_of(found, limit, lambda m: str(m.index))
    return MessagePage(items=[MessageOut.of(m) for m in page], next_cursor=next_cursor)


@router.get(
    "/threads/{thread_id}/runs", response_model=RunPage, responses=problems(400, 401, 403, 404, 422, 503)
)
async def thread_runs(
    caller: Reader,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    status: Status | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> RunPage:
    """The thread's runs, newest (latest turn) first."""
    found = await runtime.queue.list_thread_runs(
        thread_id, tenant_id=caller.tenant_id, status=status, limit=limit + 1, before_turn=_position(cursor)
    )
    page, next_cursor = page_of(found, limit, lambda turn_run: str(turn_run[0]))
    return RunPage(items=[RunOut.of(run) for _, run in page], next_cursor=next_cursor)


def check_message_sizes(body: CreateThreadRun) -> None:
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
    responses=created_responses(RunOut, 400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def create_thread_run(
    body: CreateThreadRun,
    http_request: Request,
    caller: Runner,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    response: Response,
    guard: UrlGuardDep,
    idempotency_key: IdempotencyKey = None,
) -> RunOut:
    """The conversation's next run. It starts once every earlier run of the thread has ended;
    ``multitask_strategy`` says what happens to those still in flight (409 ``thread_busy`` for
    ``reject``). Also with a thread token of it (`run`; `cancel` too for `interrupt` and
    `rollback`, else 403 `insufficient_scope`), which may not set `budget`, `priority`,
    `max_attempts`, `delay_s` or `webhook` (403 `field_not_allowed`)."""
    strategy = caller.strategy(body.multitask_strategy)
    body = caller.run_body(body)
    check_message_sizes(body)
    new = await new_run(
        body, caller.principal, runtime, guard, idempotency_key,
        traceparent=run_traceparent(http_request.headers.get("traceparent")),
    )
    run, created, cancelled = await runtime.queue.enqueue_in_thread(thread_id, new, strategy=strategy)
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


@router.post(
    "/threads/{thread_id}/token", response_model=ThreadToken, responses=problems(400, 401, 404, 413, 422, 503)
)
async def create_thread_token(
    principal: Tenant,
    thread_id: ThreadIdPath,
    runtime: RuntimeDep,
    body: Annotated[ThreadTokenRequest | None, Body()] = None,
) -> ThreadToken:
    """A token for a browser (docs/threads.md, "Browser tokens"): this thread and its runs only,
    with the scopes asked for (all four by default), bound to an agent and input fields if
    given. It goes as `Authorization: Bearer` or `?token=`."""
    body = body or ThreadTokenRequest()
    settings = runtime.settings
    if body.agent is not None and body.agent not in settings.agent_registry:
        raise ApiProblem(422, "unknown_agent", f"no agent named {body.agent!r}", agents=sorted(settings.agent_registry))
    thread = await runtime.queue.get_thread(thread_id, tenant_id=principal.tenant_id)
    scopes = sorted(set(body.scopes))
    token, expires_at = issue_thread_token(
        settings.secret_key or "",
        tenant_id=thread.tenant_id,
        thread_id=thread.id,
        scopes=scopes,
        ttl_s=body.ttl_s or settings.thread_token_ttl_s,
        agent=body.agent,
        input=body.input,
    )
    return ThreadToken(
        token=token, expires_at=expires_at, thread_id=thread.id, scopes=scopes, agent=body.agent, input=body.input
    )
