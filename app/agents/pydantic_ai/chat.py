"""OpenAI chat messages (a thread's history, §8) to PydanticAI messages and back.

A thread may mix this agent with the ``openai`` and ``demo`` agents, so it stores what every
agent reads: ``{role, content, tool_calls?, tool_call_id?}``. Going in, runs of user, system
and tool messages become one ``ModelRequest``, an assistant message one ``ModelResponse``.
Coming out, a model's request is told as the user and tool messages it carried, a response with
tool calls as an assistant message with ``tool_calls``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from app.agents.base import FatalError
from app.agents.chat_input import content_text


def to_model_messages(chat: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """The conversation as PydanticAI's message history."""
    messages: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    tool_names: dict[str, str] = {}  # tool_call_id -> name, for the tool messages that answer
    for message in chat:
        role, content = message.get("role"), content_text(message.get("content"))
        if role == "assistant":
            if parts:
                messages.append(ModelRequest(parts=parts))
                parts = []
            response: list[ModelResponsePart] = [TextPart(content)] if content else []
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                tool_names[call.get("id", "")] = function.get("name", "")
                response.append(
                    ToolCallPart(function.get("name", ""), function.get("arguments") or "{}", tool_call_id=call.get("id", ""))
                )
            messages.append(ModelResponse(parts=response))
        elif role == "tool":
            call_id = message.get("tool_call_id") or ""
            parts.append(ToolReturnPart(tool_names.get(call_id, ""), content, tool_call_id=call_id))
        elif role == "system":
            parts.append(SystemPromptPart(content))
        elif role == "user":
            parts.append(UserPromptPart(content))
        else:
            raise FatalError(f"a message needs a role of system, user, assistant or tool, not {role!r}", code="invalid_input")
    if parts:
        messages.append(ModelRequest(parts=parts))
    return messages


def request_messages(parts: Iterable[ModelRequestPart]) -> list[dict[str, Any]]:
    """What a model request added to the conversation: its user prompts, tool results and retry
    prompts (system prompts and instructions are the agent's, not the thread's)."""
    chat: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, UserPromptPart):
            chat.append({"role": "user", "content": content_text(part.content)})
        elif isinstance(part, ToolReturnPart):
            chat.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()})
        elif isinstance(part, RetryPromptPart):
            if part.tool_name is None:
                chat.append({"role": "user", "content": part.model_response()})
            else:
                chat.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()})
    return chat


def response_message(response: ModelResponse) -> dict[str, Any]:
    """A model response as an assistant message, with its tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
    calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
    if calls:
        message["tool_calls"] = [
            {"id": call.tool_call_id, "type": "function", "function": {"name": call.tool_name, "arguments": call.args_as_json_str()}}
            for call in calls
        ]
    return message

