"""The Vercel AI SDK's chat endpoints (``useChat`` with ``DefaultChatTransport``, UI message
stream protocol v1; docs/frontends.md): a chat is a thread, a message is a run of it, the answer
is that run's event log as chunks, so a reloaded page resumes it from the log (no Redis, no TTL).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sse_starlette import EventSourceResponse

from app.api.auth import Caller, Reader, Runner
from app.api.deps import Runtime
from app.api.problems import ApiProblem, problems
from app.api.protocols.ai_sdk_chunks import (
    DONE,
    Chunk,
    ChunkMapper,
    fold,
    frame,
    frames,
    without_retried_text,
)
from app.api.runs import new_run
from app.api.stream import SEND_TIMEOUT_S, follow_pages
from app.api.thread_schemas import CHAT_ID_PATTERN, ChatId, CreateThreadRun
from app.api.threads import check_message_sizes
from app.api.webhooks import UrlGuardDep
from app.domain import Run, Status, Thread
from app.errors import ThreadNotFound
from app.guards.redact import redact_data
from app.guards.ssrf import UrlGuard
from app.metrics import RESUMES, RUNS_CREATED, WAIT_SECONDS, count_ending
from app.tracing import run_traceparent

router = APIRouter(tags=["ai-sdk"])

STREAM_HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
APPROVAL_RESPONDED = "approval-responded"
RESUMABLE = (Status.PENDING, Status.LEASED)  # what GET /ai-sdk/chat/{id}/stream resumes
INFLIGHT = (*RESUMABLE, Status.WAITING)
HISTORY_PAGE = 1000

ChatIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        pattern=CHAT_ID_PATTERN,
        description="The chat id: a thread id or the thread's chat id",
    ),
]
STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The answer as a UI message stream (SSE `data:` JSON chunks, then `data: [DONE]`)",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


class ChatRequest(BaseModel):
    """What ``DefaultChatTransport`` posts, plus what its ``body`` option may add."""

    model_config = ConfigDict(extra="ignore")

    id: Annotated[ChatId, Field(description="The chat id: a thread id or the thread's chat id")]
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The client's UIMessages; runq reads only the last"
    )
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None
    agent: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="default RUNQ_CHAT_AGENT"
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="merged into the run's input (e.g. tools, approve_tools)"
    )
    multitask_strategy: Literal["enqueue", "reject", "interrupt", "rollback"] = "enqueue"


class ChatMessages(BaseModel):
    items: list[dict[str, Any]] = Field(description="The chat as AI SDK UIMessages, oldest first")


async def chat_thread(caller: Caller, chat_id: str, *, create: bool) -> Thread | None:
    """The chat's thread (:meth:`Caller.chat_thread`); None when a chat id names none yet."""
    try:
        return await caller.chat_thread(chat_id, create=create)
    except ThreadNotFound:
        if create:
            raise
        return None


@router.post(
    "/ai-sdk/chat",
    response_class=Response,
    responses={**STREAM_RESPONSE, **problems(400, 401, 404, 409, 413, 422, 429, 503)},
)
async def chat(
    body: ChatRequest,
    http_request: Request,
    caller: Runner,
    guard: UrlGuardDep,
) -> Response:
    """A chat message: a new run of the chat's thread (or the resume of the run an approval
    answers), streamed as the AI SDK's UI message stream. Also with a thread token of the chat
    (`run`; `resume` to answer an approval; `cancel` to regenerate, or with the `interrupt` and
    `rollback` strategies, else 403 `insufficient_scope`). The stream holds one of the tenant's
    stream slots (`429 too_many_streams` past its `max_streams`, and then no run is created)."""
    return await caller.runtime.presence.streaming(
        caller.tenant_id, lambda: _chat(body, http_request, caller, guard)
    )


async def _chat(body: ChatRequest, http_request: Request, caller: Caller, guard: UrlGuard) -> Response:
    runtime = caller.runtime
    thread = await chat_thread(caller, body.id, create=False)  # a token's other chat: 401 first
    last = body.messages[-1] if body.messages else {}
    if body.trigger == "submit-message" and last.get("role") == "assistant":
        return await _answer_approval(caller, thread, last)
    if body.trigger == "regenerate-message":
        caller.require("cancel")  # it erases the last run's answer, as a rollback would
    strategy = caller.strategy(body.multitask_strategy)
    prompt = _user_text(last)
    if prompt is None:
        raise ApiProblem(
            422, "no_user_message", "the last message must be a user message with text"
        )
    agent = body.agent or (caller.grant and caller.grant.agent) or runtime.settings.chat_agent
    fields = {
        "agent": agent,
        "input": {**body.input, "prompt": prompt},
        "multitask_strategy": body.multitask_strategy,
    }
    try:
        create = caller.run_body(CreateThreadRun.model_validate(fields))
    except (
        ValidationError
    ) as exc:  # e.g. a NUL in `input`, which jsonb cannot store: 422 as for /runs
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    check_message_sizes(create)
    new = await new_run(
        create,
        caller.principal,
        runtime,
        guard,
        None,
        traceparent=run_traceparent(http_request.headers.get("traceparent")),
    )
    thread = thread or await chat_thread(caller, body.id, create=True)  # a chat's first message
    assert thread is not None
    if body.trigger == "regenerate-message":
        run = await runtime.queue.regenerate_in_thread(thread.id, new)
    else:
        run, _, cancelled = await runtime.queue.enqueue_in_thread(thread.id, new, strategy=strategy)
        for stopped in cancelled:
            count_ending(stopped)
    RUNS_CREATED.labels(agent=run.agent).inc()
    return _stream(runtime, run, ChunkMapper(str(run.id)), after=0)


async def _answer_approval(
    caller: Caller, thread: Thread | None, message: dict[str, Any]
) -> Response:
    """The client answered an approval (``addToolApprovalResponse``): resume that run and
    stream only the continuation, which ``useChat`` folds into the same message."""
    approval = next(
        (
            p.get("approval")
            for p in message.get("parts") or []
            if isinstance(p, dict) and p.get("state") == APPROVAL_RESPONDED
        ),
        None,
    )
    if not isinstance(approval, dict) or not isinstance(approval.get("approved"), bool):
        raise ApiProblem(
            422,
            "no_user_message",
            "the last message must be a user message or an approval response",
        )
    try:
        run_id, waitpoint_id = uuid.UUID(str(message.get("id"))), uuid.UUID(str(approval.get("id")))
    except ValueError as exc:
        raise ApiProblem(
            409, "not_waiting", "the approval names no waiting run of this chat"
        ) from exc
    caller.require("resume")
    run = await caller.found_run(run_id)
    if thread is None or run.thread_id != thread.id:
        raise ApiProblem(409, "not_waiting", "the approval names no waiting run of this chat")
    waitpoint = run.waitpoint or {}
    value = {"approved": approval["approved"], "note": approval.get("reason")}
    resumed = await caller.runtime.queue.resume(
        run.id, tenant_id=caller.tenant_id, value=redact_data(value), waitpoint_id=waitpoint_id
    )
    RESUMES.labels(outcome="value").inc()
    WAIT_SECONDS.observe(resumed.waited_s)
    mapper = ChunkMapper(str(run.id))
    mapper.resuming(waitpoint)
    # From the ``run.resumed`` event on: the client already has everything before it.
    return _stream(caller.runtime, resumed.run, mapper, after=resumed.run.last_event_seq - 1)


def _user_text(message: dict[str, Any]) -> str | None:
    if message.get("role") != "user":
        return None
    parts = message.get("parts")
    texts = (
        [
            p["text"]
            for p in parts
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        if isinstance(parts, list)
        else []
    )
    text = "".join(texts)
    return text or None


def _stream(runtime: Runtime, run: Run, mapper: ChunkMapper, *, after: int) -> EventSourceResponse:
    return EventSourceResponse(
        _answer(runtime, run, mapper, after=after),
        headers=STREAM_HEADERS,
        ping=runtime.sse_ping_s * random.uniform(0.8, 1.0),
        sep="\n",
        send_timeout=SEND_TIMEOUT_S,
    )


async def _answer(
    runtime: Runtime, run: Run, mapper: ChunkMapper, *, after: int
) -> AsyncIterator[bytes]:
    """``start``, the run's events after ``after`` as chunks until the message ends (the run
    is terminal, or stopped at a wait), then ``[DONE]``."""
    assert run.thread_id is not None
    yield frame(after + 1, mapper.start(str(run.thread_id)))
    pages = follow_pages(
        run, after=after, hub=runtime.hub, presence=runtime.presence, poll_s=runtime.settings.poll_s
    )
    async with aclosing(pages):
        async for page in pages:
            yield frames(mapper, page.events)  # a page's frames in one write, as native SSE sends them
            if mapper.waiting and not page.full and not mapper.ended:
                last_seq = page.events[-1][0]
                for chunk in mapper.finish_at_wait():
                    yield frame(last_seq, chunk)
            if mapper.ended:
                break
    if mapper.ended:
        yield DONE


@router.get(
    "/ai-sdk/chat/{chat_id}/stream",
    response_class=Response,
    responses={
        **STREAM_RESPONSE,
        204: {"description": "No answer in flight"},
        **problems(401, 404, 422, 429, 503),
    },
)
async def resume_chat(chat_id: ChatIdPath, caller: Reader) -> Response:
    """The answer in flight (``reconnectToStream``), from its first event: its whole message,
    then live to its end; 204 when no run of the chat is pending or running (or no such chat
    yet). Also with a thread token of the chat (`read`)."""
    return await caller.runtime.presence.streaming(caller.tenant_id, lambda: _in_flight(chat_id, caller))


async def _in_flight(chat_id: str, caller: Caller) -> Response:
    runtime = caller.runtime
    thread = await chat_thread(caller, chat_id, create=False)
    if thread is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    latest = await runtime.queue.list_thread_runs(thread.id, tenant_id=caller.tenant_id, limit=1)
    if not latest or latest[0][1].status not in RESUMABLE:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    run = latest[0][1]
    return _stream(runtime, run, ChunkMapper(str(run.id)), after=0)


@router.get(
    "/ai-sdk/chat/{chat_id}/messages",
    response_model=ChatMessages,
    responses=problems(401, 404, 422, 503),
)
async def chat_messages(chat_id: ChatIdPath, caller: Reader) -> ChatMessages:
    """The chat as ``UIMessage``s for a reloaded page: each run's user message and its answer
    (a pending approval as an ``approval-requested`` tool part). The answer of a run still in
    flight is left out: the page's resume streams it whole. A chat with no message yet is
    empty. Also with a thread token of the chat (`read`)."""
    runtime = caller.runtime
    thread = await chat_thread(caller, chat_id, create=False)
    if thread is None:
        return ChatMessages(items=[])
    in_history = await _runs_in_history(runtime, thread)
    runs = await _thread_runs(runtime, thread)  # newest first
    resumable = runs[0].id if runs and runs[0].status in RESUMABLE else None
    items: list[dict[str, Any]] = []
    for run in reversed(runs):
        if run.id not in in_history and run.status not in INFLIGHT:
            continue  # regenerated, or ended before it wrote anything
        prompt = run.input.get("prompt")
        if isinstance(prompt, str):
            items.append(
                {
                    "id": f"{run.id}-user",
                    "role": "user",
                    "parts": [{"type": "text", "text": prompt}],
                }
            )
        if run.id != resumable:  # the answer the page's resume replays whole
            items.append(await _answer_message(runtime, run, thread))
    return ChatMessages(items=items)


async def _thread_runs(runtime: Runtime, thread: Thread) -> list[Run]:
    runs: list[Run] = []
    before: int | None = None
    while True:
        page = await runtime.queue.list_thread_runs(
            thread.id, tenant_id=thread.tenant_id, limit=200, before_turn=before
        )
        runs += [run for _, run in page]
        if len(page) < 200:
            return runs
        before = page[-1][0]


async def _runs_in_history(runtime: Runtime, thread: Thread) -> set[uuid.UUID]:
    found: set[uuid.UUID] = set()
    after = -1
    while True:
        page = await runtime.queue.thread_messages(
            thread.id, tenant_id=thread.tenant_id, after=after, limit=HISTORY_PAGE
        )
        found |= {m.run_id for m in page if m.run_id is not None}
        if len(page) < HISTORY_PAGE:
            return found
        after = page[-1].index


async def _answer_message(runtime: Runtime, run: Run, thread: Thread) -> dict[str, Any]:
    mapper = ChunkMapper(str(run.id))
    events: list[tuple[int, str, dict[str, Any]]] = []
    while True:
        page = await runtime.queue.read_events(
            run.id, after=events[-1][0] if events else 0, limit=HISTORY_PAGE
        )
        events += [(e.seq, e.type, e.data) for e in page]
        if len(page) < HISTORY_PAGE:
            break
    chunks: list[Chunk] = []
    for seq, type_, data in without_retried_text(events):
        chunks += mapper.map(seq, type_, data)
    start = mapper.start(str(thread.id))
    return fold(str(run.id), chunks, start["messageMetadata"])
