"""A runq thread as the SDK's ``Session``: §8's history in, the run's new items out.

A thread may mix this agent with the ``openai`` agent, PydanticAI agents and ``demo``, so it
stores what every one of them reads: OpenAI chat messages ``{role, content, tool_calls?,
tool_call_id?}``. Going in, they become the SDK's input items (an assistant message with tool
calls becomes its text and one ``function_call`` item per call, a tool message a
``function_call_output``); coming out, the items the SDK adds become chat messages again, a
turn's text and calls one assistant message.

A retried attempt replays the run from its start, and the SDK adds every replayed turn's items
again. So the session stores nothing itself: it converts what the SDK adds and hands it to the
run's steps (:meth:`RunSteps.step`), where it rides with the record of the next step run live,
in the same commit, or is dropped when that step is replayed (an earlier attempt stored it
with that record); what is left at the end goes with the run's ending. Each item is stored once.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents import TResponseInputItem, UserError
from agents.memory import SessionABC
from pydantic_core import to_jsonable_python

from app.agents.base import FatalError, RunContext
from app.agents.chat_input import content_text

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ThreadSession(SessionABC):
    """The run's thread (``session_id`` = the thread id), for this attempt.

    ``history`` is what the model reads before the run's own items (the thread's messages, a
    ``system`` prompt first when the input gives one, never stored); ``unstored`` the run's
    list of chat messages not stored yet, which the added items join.
    """

    def __init__(self, ctx: RunContext, history: Sequence[Mapping[str, Any]], *, unstored: list[dict[str, Any]]) -> None:
        assert ctx.thread is not None
        self.session_id = str(ctx.thread.id)
        self._items: list[TResponseInputItem] = to_items(history)
        self._unstored = unstored

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        items = self._items[-limit:] if limit else self._items
        return copy.deepcopy(items)  # the SDK's own sessions hand out fresh items too

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self._items.extend(items)
        self._unstored.extend(to_chat(items))

    async def pop_item(self) -> TResponseInputItem | None:
        raise UserError("a runq thread's history only grows; rollback is the thread's own (POST /threads/{id}/runs)")

    async def clear_session(self) -> None:
        raise UserError("a runq thread's history is cleared by deleting the thread (DELETE /threads/{id})")


def to_items(chat: Iterable[Mapping[str, Any]]) -> list[TResponseInputItem]:
    """Chat messages as the SDK's input items."""
    items: list[Any] = []
    for message in chat:
        role, content = message.get("role"), content_text(message.get("content"))
        if role == "assistant":
            if content:
                items.append({"role": "assistant", "content": content})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {"type": "function_call", "call_id": call.get("id", ""), "name": function.get("name", ""),
                     "arguments": function.get("arguments") or "{}"}
                )  # fmt: skip
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id") or "", "output": content})
        elif role in ("system", "user"):
            items.append({"role": role, "content": content})
        else:
            raise FatalError(f"a message needs a role of system, user, assistant or tool, not {role!r}", code="invalid_input")
    return items


def to_chat(items: Iterable[Any]) -> list[dict[str, Any]]:
    """The SDK's items as chat messages: a function call joins the assistant message before it
    (the text and calls of one response); items chat has no place for (reasoning, hosted tools'
    calls) are left out."""
    chat: list[dict[str, Any]] = []
    for raw in items:
        item = to_jsonable_python(raw)
        kind, role = item.get("type"), item.get("role")
        if kind == "function_call":
            call = {"id": item.get("call_id", ""), "type": "function",
                    "function": {"name": item.get("name", ""), "arguments": item.get("arguments") or "{}"}}  # fmt: skip
            if chat and chat[-1]["role"] == "assistant":
                chat[-1].setdefault("tool_calls", []).append(call)
            else:
                chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            chat.append({"role": "tool", "tool_call_id": item.get("call_id", ""), "content": text})
        elif kind in (None, "message") and role in _ROLES:
            chat.append({"role": _ROLES[role], "content": content_text(item.get("content"))})
    return chat
