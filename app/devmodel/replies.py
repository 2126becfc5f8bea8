"""What the development model answers: a pure function of the request, so every walkthrough
and test that talks to it sees the same answer for the same conversation.

The convention (docs/dev-model.md):

- After tool results (the last message is a ``tool`` message) it answers in text what each tool
  returned, so an agent's loop ends.
- ``call NAME {json}`` in the last user message calls the offered tool ``NAME`` with those
  arguments (``call NAME`` alone fills them as below).
- Otherwise, a message that names an offered tool (``refund``, ``send_invite`` or "send invite")
  calls it. Its arguments come from the message: a parameter named in it takes the word after
  its name ("order 42" gives ``order_id: "42"``), else a string takes the text between
  backticks, a number the first number, and anything else the last word.
- Otherwise it answers in text, quoting the message. ``tool_choice: "required"`` (a structured
  output) always calls a tool: the named one, else the first offered.

Usage counts words: every message's as prompt tokens, the answer's as completion tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.devmodel.wire import Answer, ToolCall

CALL = re.compile(r"\bcall\s+([A-Za-z0-9_.-]+)\s*(\{.*\})?", re.S)
BACKTICKS = re.compile(r"`([^`]+)`")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
WORD = re.compile(r"[\w./:@-]+")
HINT = (
    "I am runq's development model: I answer the same way every time, without a key. "
    "Name a tool the run offers to have me call it."
)


def answer(body: Mapping[str, Any], *, piece: int = 4) -> Answer:
    """The response to one ``/chat/completions`` request body."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = _tools(body.get("tools"))
    prompt_tokens = sum(_words(_text(m.get("content"))) for m in messages)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        text = _summary(messages)
        return Answer(text=text, usage=(prompt_tokens, _words(text)), piece=piece)
    prompt = _text(last.get("content")) if last.get("role") == "user" else ""
    call = _chosen_call(prompt, tools, body.get("tool_choice"), turn=len(messages))
    if call is not None:
        return Answer(tool_calls=[call], usage=(prompt_tokens, _words(call.arguments_json)), piece=piece)
    text = f"You said: {prompt.strip()}\n\n{HINT}" if prompt.strip() else HINT
    return Answer(text=text, usage=(prompt_tokens, _words(text)), piece=piece)


def _chosen_call(prompt: str, tools: Mapping[str, dict[str, Any]], choice: object, *, turn: int) -> ToolCall | None:
    if not tools:
        return None
    call_id = f"call_{turn}"
    explicit = CALL.search(prompt)
    if explicit and explicit[1] in tools:
        arguments = _json_object(explicit[2]) if explicit[2] else None
        return ToolCall(call_id, explicit[1], arguments if arguments is not None else _arguments(prompt, tools[explicit[1]]))
    lowered = prompt.lower()
    for name, schema in tools.items():
        spoken = name.lower().replace("_", " ")
        if re.search(rf"\b({re.escape(name.lower())}|{re.escape(spoken)})\b", lowered):
            return ToolCall(call_id, name, _arguments(prompt, schema))
    if choice == "required" or isinstance(choice, dict):
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        name = named if isinstance(named, str) and named in tools else next(iter(tools))
        return ToolCall(call_id, name, _arguments(prompt, tools[name]))
    return None


def _arguments(prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    words = WORD.findall(prompt)
    quoted = BACKTICKS.findall(prompt)
    numbers = NUMBER.findall(prompt)
    arguments: dict[str, Any] = {}
    for name in required:
        kind = (properties.get(name) or {}).get("type", "string")
        value = _after_name(name, words)
        if value is None and kind == "string" and quoted:
            value = quoted[0]
        if value is None and kind in ("number", "integer") and numbers:
            value = numbers[0]
        if value is None:
            value = words[-1] if words else ""
        arguments[name] = _typed(value, kind)
    return arguments


def _after_name(name: str, words: Sequence[str]) -> str | None:
    """The word after the parameter's name, or after its first part (``order`` of ``order_id``);
    one with a digit first ("the status of order 42" gives ``42``, not ``status``)."""
    spoken = {name.lower(), name.split("_")[0].lower()}
    following = [words[i + 1] for i, word in enumerate(words[:-1]) if word.lower() in spoken]
    return next((word for word in following if any(c.isdigit() for c in word)), None) or next(iter(following), None)


def _typed(value: str, kind: str) -> Any:
    value = value.rstrip(".,;:!?")
    if kind in ("number", "integer"):
        match = NUMBER.search(value)
        number = float(match[0]) if match else 0.0
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return value.lower() in ("yes", "true", "1")
    return value


def _summary(messages: Sequence[Mapping[str, Any]]) -> str:
    """One sentence per tool result since the last assistant message."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = (call.get("function") or {}).get("name", "the tool")
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = names.get(message.get("tool_call_id", ""), "the tool")
        results.append(f"{name} returned: {_text(message.get('content')).strip()}")
    return "Done. " + "; ".join(reversed(results)) + "."


def _tools(declared: object) -> dict[str, dict[str, Any]]:
    tools: dict[str, dict[str, Any]] = {}
    for tool in declared if isinstance(declared, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools[function["name"]] = function.get("parameters") or {}
    return tools


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_parts(content))
    return ""


def _parts(parts: Iterable[object]) -> Iterable[str]:
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            yield part["text"]


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _words(text: str) -> int:
    return len(text.split())
