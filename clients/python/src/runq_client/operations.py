"""Every API operation as a :class:`~runq_client.calls.Call` (DESIGN §2, §8, §9): path, body,
headers and the type of the answer, written once for the sync and the async client."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from runq_client.calls import Call
from runq_client.models import (
    EventPage,
    Message,
    Page,
    Run,
    StreamToken,
    Thread,
    ThreadToken,
    event_page,
    page_of,
)

RunId = str | uuid.UUID
MULTITASK_STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")


def _id(value: RunId) -> str:
    return quote(str(value), safe="")


def _query(**params: str | int | None) -> dict[str, str | int]:
    return {name: value for name, value in params.items() if value is not None}


def _nothing(_: Any) -> None:
    return None


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def create_run(agent: str, input: Mapping[str, Any] | None, fields: Mapping[str, Any],
               idempotency_key: str | None, *, thread_id: RunId | None = None) -> Call[Run]:
    """``POST /runs`` (or a thread's runs): idempotent because it always carries a key."""
    path = "/runs" if thread_id is None else f"/threads/{_id(thread_id)}/runs"
    return Call(
        "POST",
        path,
        Run.from_json,
        body={"agent": agent, "input": dict(input or {}), **fields},
        has_body=True,
        headers={"Idempotency-Key": idempotency_key or new_idempotency_key()},
    )


def get_run(run_id: RunId) -> Call[Run]:
    return Call("GET", f"/runs/{_id(run_id)}", Run.from_json)


def list_runs(status: str | None, limit: int | None, cursor: str | None, *,
              thread_id: RunId | None = None) -> Call[Page[Run]]:
    path = "/runs" if thread_id is None else f"/threads/{_id(thread_id)}/runs"
    return Call("GET", path, page_of(Run.from_json), params=_query(status=status, limit=limit, cursor=cursor))


def cancel_run(run_id: RunId, note: str | None) -> Call[Run]:
    """Not idempotent: a repeat after a lost answer may find the run cancelled (``409``)."""
    body = {"note": note} if note is not None else {}
    return Call("POST", f"/runs/{_id(run_id)}/cancel", Run.from_json, body=body, has_body=True, idempotent=False)


def resume_run(run_id: RunId, value: Any, waitpoint_id: str | None) -> Call[Run]:
    """Not idempotent: of two resumes of one waitpoint only the first wins, the other is ``409``."""
    body: dict[str, Any] = {"value": value}
    if waitpoint_id is not None:
        body["waitpoint_id"] = waitpoint_id
    return Call("POST", f"/runs/{_id(run_id)}/resume", Run.from_json, body=body, has_body=True, idempotent=False)


def list_events(run_id: RunId, after: int, limit: int | None) -> Call[EventPage]:
    return Call(
        "GET",
        f"/runs/{_id(run_id)}/events",
        event_page,
        params=_query(after=after, limit=limit),
        headers={"Accept": "application/json"},
    )


def stream_events(run_id: RunId, after: int) -> Call[None]:
    """The SSE request; its body is read by :class:`runq_client.follow.Follow`, not parsed here."""
    return Call(
        "GET",
        f"/runs/{_id(run_id)}/events",
        _nothing,
        params={"after": after},
        headers={"Accept": "text/event-stream", "Cache-Control": "no-store"},
    )


def stream_token(run_id: RunId, scopes: list[str] | None) -> Call[StreamToken]:
    body = {"scopes": scopes} if scopes is not None else None
    return Call("POST", f"/runs/{_id(run_id)}/stream-token", StreamToken.from_json, body=body,
                has_body=body is not None)


def create_thread(metadata: Mapping[str, Any] | None, idempotency_key: str | None,
                  chat_id: str | None = None) -> Call[Thread]:
    body: dict[str, Any] = {"metadata": dict(metadata)} if metadata is not None else {}
    if chat_id is not None:
        body["chat_id"] = chat_id
    return Call(
        "POST",
        "/threads",
        Thread.from_json,
        body=body,
        has_body=True,
        headers={"Idempotency-Key": idempotency_key or new_idempotency_key()},
    )


def thread_token(thread_id: RunId, scopes: list[str] | None, ttl_s: float | None, agent: str | None,
                 input: Mapping[str, Any] | None) -> Call[ThreadToken]:
    """``POST /threads/{id}/token``: each call mints a new token, so a repeat is harmless."""
    body = {"scopes": scopes, "ttl_s": ttl_s, "agent": agent, "input": dict(input) if input is not None else None}
    return Call("POST", f"/threads/{_id(thread_id)}/token", ThreadToken.from_json,
                body={k: v for k, v in body.items() if v is not None}, has_body=True)


def get_thread(thread_id: RunId) -> Call[Thread]:
    return Call("GET", f"/threads/{_id(thread_id)}", Thread.from_json)


def list_threads(limit: int | None, cursor: str | None) -> Call[Page[Thread]]:
    return Call("GET", "/threads", page_of(Thread.from_json), params=_query(limit=limit, cursor=cursor))


def thread_messages(thread_id: RunId, limit: int | None, cursor: str | None) -> Call[Page[Message]]:
    return Call("GET", f"/threads/{_id(thread_id)}/messages", page_of(Message.from_json),
                params=_query(limit=limit, cursor=cursor))


def delete_thread(thread_id: RunId) -> Call[None]:
    # Idempotent in effect: a repeat after a lost answer finds no thread (404), nothing more.
    return Call("DELETE", f"/threads/{_id(thread_id)}", _nothing)


def thread_run_fields(multitask_strategy: str | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    if multitask_strategy is None:
        return dict(fields)
    if multitask_strategy not in MULTITASK_STRATEGIES:
        raise ValueError(f"multitask_strategy must be one of {MULTITASK_STRATEGIES}")
    return {**fields, "multitask_strategy": multitask_strategy}

