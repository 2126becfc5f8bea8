"""Request and response bodies of the thread routes (docs/threads.md) and their tokens."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.schemas import CreateRun, FiniteSeconds, StoredObject, fields_of
from app.domain import Thread, ThreadMessage

# -- threads (docs/threads.md) -----------------------------------------------------------------

MAX_MESSAGE_CHARS = 100_000  # a prompt becomes a history message, sent to the model on every later run
# A chat frontend's own name for a thread; it travels in URL paths (/ai-sdk/chat/{id}/stream), so
# printable ASCII without a slash.
CHAT_ID_PATTERN = r"^[!-.0-~]+$"
ChatId = Annotated[str, Field(min_length=1, max_length=200, pattern=CHAT_ID_PATTERN, examples=["chat_8f3k2"])]


class CreateThread(BaseModel):
    """``POST /threads``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    metadata: StoredObject = Field(default_factory=dict, examples=[{"user": "u_123"}])
    chat_id: ChatId | None = Field(
        default=None, description="a chat frontend's name for the thread, unique per tenant (409 chat_id_conflict)"
    )


class CreateThreadRun(CreateRun):
    """``POST /threads/{id}/runs``: a run body plus what it does to the runs in flight."""

    multitask_strategy: Literal["enqueue", "reject", "interrupt", "rollback"] = Field(
        default="enqueue",
        description="enqueue: wait for its turn; reject: 409 thread_busy while a run is in flight; "
        "interrupt: cancel the runs in flight (their messages stay); rollback: cancel them and remove their messages",
    )


class ThreadOut(BaseModel):
    id: uuid.UUID
    tenant_id: str
    metadata: dict[str, Any]
    chat_id: str | None
    status: Literal["idle", "busy"] = Field(description="busy while a run of the thread is not terminal")
    created_at: datetime
    updated_at: datetime
    last_run_id: uuid.UUID | None
    message_count: int

    @classmethod
    def of(cls, thread: Thread) -> ThreadOut:
        return cls(**fields_of(cls, thread, status="busy" if thread.busy else "idle"))


class ThreadPage(BaseModel):
    items: list[ThreadOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


class MessageOut(BaseModel):
    """One history message in OpenAI chat format, with its place and the run that added it."""

    index: int
    role: str
    content: Any
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    run_id: uuid.UUID | None = Field(description="the run that added it (kept after retention purged the run)")
    created_at: datetime

    @classmethod
    def of(cls, message: ThreadMessage) -> MessageOut:
        m = message.message
        return cls(
            index=message.index,
            role=str(m.get("role")),
            content=m.get("content"),
            tool_calls=m.get("tool_calls"),
            tool_call_id=m.get("tool_call_id"),
            run_id=message.run_id,
            created_at=message.created_at,
        )


class MessagePage(BaseModel):
    items: list[MessageOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


# -- thread tokens (docs/threads.md, "Browser tokens") ------------------------------------------

ThreadScope = Literal["read", "run", "resume", "cancel"]
THREAD_SCOPES: tuple[ThreadScope, ...] = ("read", "run", "resume", "cancel")
MAX_THREAD_TOKEN_TTL_S = 86400.0
MAX_BOUND_INPUT_CHARS = 4096  # the bound input travels in every request's token


def _all_thread_scopes() -> list[ThreadScope]:
    return list(THREAD_SCOPES)


class ThreadTokenRequest(BaseModel):
    """``POST /threads/{id}/token``: what a browser may do with the thread, for how long, and
    the agent and input fields its runs are bound to."""

    model_config = ConfigDict(extra="forbid", strict=True)

    scopes: Annotated[list[ThreadScope], Field(min_length=1, max_length=4)] = Field(
        default_factory=_all_thread_scopes,
        description="read: the thread, its messages, runs and events; run: new runs; resume; cancel",
    )
    ttl_s: Annotated[FiniteSeconds, Field(gt=0, le=MAX_THREAD_TOKEN_TTL_S)] | None = Field(
        default=None, description="default RUNQ_THREAD_TOKEN_TTL_S"
    )
    agent: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="the only agent the token's runs may use"
    )
    input: StoredObject | None = Field(
        default=None,
        description="input fields every run of the token gets, over the browser's own",
        examples=[{"tools": ["search"]}],
    )

    @field_validator("input")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_BOUND_INPUT_CHARS:
            raise ValueError(f"the bound input may hold at most {MAX_BOUND_INPUT_CHARS} characters of JSON")
        return value


class ThreadToken(BaseModel):
    token: str = Field(description="`Authorization: Bearer <token>` or `?token=` on the thread's routes")
    expires_at: datetime
    thread_id: uuid.UUID
    scopes: list[ThreadScope]
    agent: str | None
    input: dict[str, Any] | None
