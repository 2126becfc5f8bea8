"""What ``@ag-ui/client``'s ``HttpAgent`` posts: a ``RunAgentInput`` (docs/frontends-ag-ui.md).

Loose like the client's own schema (fields runq does not read, such as ``protocolVersion`` or a
message's ``metadata``, are accepted and ignored), and checked where a value reaches the
database: the prompt, ``forwardedProps.input`` and the resume payloads become stored JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.schemas import StoredObject, StoredText, StoredValue, _check_json
from app.api.thread_schemas import MAX_MESSAGE_CHARS, ChatId

Id = Annotated[StoredText, Field(min_length=1, max_length=200)]


class AgUiMessage(BaseModel):
    """One message of the conversation; runq reads only the last user message's text."""

    model_config = ConfigDict(extra="allow")

    id: Annotated[str, Field(max_length=200)] | None = None
    role: Annotated[str, Field(min_length=1, max_length=50)]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The text of the message: its string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content or [] if p.get("type") == "text")


class ResumeEntry(BaseModel):
    """An answer to an interrupt: ``interruptId`` is the waitpoint id runq sent."""

    model_config = ConfigDict(extra="allow")

    interruptId: Id
    status: Literal["resolved", "cancelled"]
    payload: StoredValue = None


class ForwardedProps(BaseModel):
    """``forwardedProps``: runq reads ``input``, fields merged into the run's input."""

    model_config = ConfigDict(extra="allow")

    input: StoredObject = Field(default_factory=dict, examples=[{"steps": 2}])


class RunAgentInput(BaseModel):
    """``POST /ag-ui/{agent}``: ``threadId`` names the thread (a runq thread id, or the chat's
    own name for it), ``runId`` is the idempotency key of what the request starts."""

    model_config = ConfigDict(extra="allow")

    threadId: ChatId
    runId: Id
    messages: Annotated[list[AgUiMessage], Field(max_length=10_000)]
    state: Any = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    context: list[dict[str, Any]] = Field(default_factory=list)
    forwardedProps: ForwardedProps | None = None
    resume: Annotated[list[ResumeEntry], Field(max_length=100)] | None = None

    def prompt(self) -> str | None:
        """The last user message's text, the run's ``input.prompt``."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text()
        return None

    @field_validator("messages")
    @classmethod
    def _sizes(cls, messages: list[AgUiMessage]) -> list[AgUiMessage]:
        for message in messages:
            text = message.text()
            if len(text) > MAX_MESSAGE_CHARS:
                raise ValueError(f"a message may hold at most {MAX_MESSAGE_CHARS} characters")
            _check_json(text)
        return messages


__all__ = ["AgUiMessage", "ForwardedProps", "ResumeEntry", "RunAgentInput"]
