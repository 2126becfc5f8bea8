"""The input of the built-in chat agents (``openai``, and framework agents that take a prompt or
OpenAI-format messages), as ``input_schema`` models: checked when a run is created. Typed
fields are checked; other fields are accepted, so existing clients keep working."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.agents.base import MAX_WAIT_S

Strict = Field(strict=True)  # no "1.5" for a number, no true for a number
Messages = Annotated[list[dict[str, Any]], Field(min_length=1, description="OpenAI chat-format messages")]
Seconds = Annotated[float, Field(strict=True, gt=0, le=MAX_WAIT_S)]


class ChatInput(BaseModel):
    """``prompt`` (one user message) or ``messages``."""

    model_config = ConfigDict(extra="allow")

    prompt: str | None = None
    messages: Messages | None = None

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> ChatInput:
        if self.messages is None and not self.prompt and not self._other_opening():
            raise ValueError(f"input needs {self._openings()}")
        return self

    def _openings(self) -> str:
        return "`prompt` (a non-empty string) or `messages`"

    def _other_opening(self) -> bool:
        return False

    def opening_messages(self) -> list[dict[str, Any]]:
        """The new input as chat messages: ``messages``, or ``prompt`` as one user message."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt}]


class SystemChatInput(ChatInput):
    """A chat input with an optional ``system`` prompt: what the ``openai`` agent's opening reads."""

    system: str | None = None


class OpenAIInput(SystemChatInput):
    """The ``openai`` agent's input (docs/openai-agent.md)."""

    model: Annotated[str, Field(min_length=1)] | None = None
    temperature: Annotated[float, Strict] | None = None
    tools: list[str] | None = None
    approve_tools: list[str] | Literal["*"] | None = Field(
        default=None, description='tool names whose calls wait for a person, or "*" for every tool'
    )
    approval_timeout_s: Seconds | None = None


class LangGraphInput(ChatInput):
    """A LangGraph agent's input (app/agents/langgraph/): ``prompt``, ``messages`` or the graph's
    own ``state``. A subclass whose ``graph_input`` reads another shape declares its own."""

    state: dict[str, Any] | None = None
    interrupt_timeout_s: Seconds | None = None

    def _other_opening(self) -> bool:
        return self.state is not None

    def _openings(self) -> str:
        return "`prompt` (a non-empty string), `messages` or `state` (the graph's input as is)"

def content_text(content: Any) -> str:
    """A chat message's content as text: content parts (``[{type: "text", text}]``, or the
    Responses API's ``input_text`` / ``output_text`` parts) joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return json.dumps(content, default=str)
