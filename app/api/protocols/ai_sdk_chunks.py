"""runq's events as the Vercel AI SDK's UI message stream chunks (protocol v1), and the fold of
those chunks into a ``UIMessage`` for a thread's history.

Pure: no I/O, so the live stream, a replay and the history page all run the same code and a
replay is byte-identical to what was sent live. Every id is derived from the log: the message id
is the run id, a text part's id is the run id and the seq of its first delta.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.db import jsonb

Chunk = dict[str, Any]
APPROVAL_WAIT = "approval"  # the name the openai agent waits under before a gated tool call


@dataclass(slots=True)
class ChunkMapper:
    """Maps one run's events, in seq order, to chunks; ``ended`` once the message is over (a
    terminal event) and ``waiting`` while it stopped at a wait."""

    run_id: str
    shown_tool_calls: set[str] = field(default_factory=set)  # tool parts the client already has
    approvals: dict[str, str] = field(default_factory=dict)  # waitpoint id -> tool call id
    denied: set[str] = field(default_factory=set)
    text_id: str | None = None
    step_open: bool = False
    waiting: bool = False
    ended: bool = False

    def start(self, thread_id: str) -> Chunk:
        return {
            "type": "start",
            "messageId": self.run_id,
            "messageMetadata": {"run_id": self.run_id, "thread_id": thread_id},
        }

    def resuming(self, waitpoint: dict[str, Any]) -> None:
        """A continuation after the client answered this waitpoint: its tool part is on the client."""
        call_id = _approval_call(waitpoint.get("name"), waitpoint.get("payload"))
        if call_id is not None:
            self.approvals[str(waitpoint["waitpoint_id"])] = call_id
            self.shown_tool_calls.add(call_id)

    def map(self, seq: int, type_: str, data: dict[str, Any]) -> list[Chunk]:
        handler = _HANDLERS.get(type_)
        return (
            handler(self, seq, data) if handler else [{"type": f"data-runq-{type_}", "data": data}]
        )

    def finish_at_wait(self) -> list[Chunk]:
        """The end of the answer when the run stopped at a wait."""
        self.ended = True
        return [{"type": "finish"}]

    def _close_text(self) -> list[Chunk]:
        if self.text_id is None:
            return []
        chunk = {"type": "text-end", "id": self.text_id}
        self.text_id = None
        return [chunk]

    def _close_step(self) -> list[Chunk]:
        chunks = self._close_text()
        if self.step_open:
            self.step_open = False
            chunks.append({"type": "finish-step"})
        return chunks

    def _started(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        chunks = self._close_step()
        self.step_open = True
        return [*chunks, {"type": "start-step"}]

    def _delta(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        chunks: list[Chunk] = []
        if self.text_id is None:
            self.text_id = f"{self.run_id}-{seq}"
            chunks.append({"type": "text-start", "id": self.text_id})
        chunks.append(
            {"type": "text-delta", "id": self.text_id, "delta": str(data.get("text", ""))}
        )
        return chunks

    def _completed_text(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        if self.text_id is not None:
            return self._close_text()
        if not data.get("text"):
            return []  # a turn of tool calls only
        # A turn that was not streamed: its whole text in one part.
        return [*self._delta(seq, data), *self._close_text()]

    def _tool_call(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        call_id = str(data.get("tool_call_id", ""))
        if call_id in self.shown_tool_calls:
            return []  # its part came from the approval wait
        self.shown_tool_calls.add(call_id)
        name = str(data.get("name", ""))
        base = {"toolCallId": call_id, "toolName": name, "dynamic": True}
        return [
            *self._close_text(),
            {"type": "tool-input-start", **base},
            {"type": "tool-input-available", **base, "input": data.get("arguments")},
        ]

    def _tool_result(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        call_id = str(data.get("tool_call_id", ""))
        if call_id in self.denied:
            return []  # already ``output-denied``; the error the model got is not the client's
        if data.get("is_error"):
            output = data.get("output")
            text = output if isinstance(output, str) else jsonb.dumps(output).decode()
            return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": text}]
        return [
            {"type": "tool-output-available", "toolCallId": call_id, "output": data.get("output")}
        ]

    def _waiting(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        self.waiting = True
        payload = data.get("payload")
        call_id = _approval_call(data.get("name"), payload)
        if call_id is None:
            return [{"type": "data-runq-run.waiting", "data": data}, *self._close_step()]
        assert isinstance(payload, dict)
        self.approvals[str(data.get("waitpoint_id"))] = call_id
        chunks = self._tool_call(seq, {"tool_call_id": call_id, **payload})
        chunks.append(
            {
                "type": "tool-approval-request",
                "approvalId": str(data.get("waitpoint_id")),
                "toolCallId": call_id,
            }
        )
        return [*chunks, *self._close_step()]

    def _resumed(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        self.waiting = False
        call_id = self.approvals.get(str(data.get("waitpoint_id")))
        if call_id is None:
            return [{"type": "data-runq-run.resumed", "data": data}]
        value = data.get("value")
        if isinstance(value, dict) and value.get("approved") is True:
            return []
        self.denied.add(call_id)
        return [{"type": "tool-output-denied", "toolCallId": call_id}]

    def _retrying(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        return [*self._close_step(), {"type": "data-runq-run.retrying", "data": data}]

    def _completed(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        self.ended = True
        return [*self._close_step(), {"type": "finish"}]

    def _failed(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        self.ended = True
        text = data.get("error_message") or data.get("error_code") or "the run failed"
        return [*self._close_step(), {"type": "error", "errorText": str(text)}]

    def _cancelled(self, seq: int, data: dict[str, Any]) -> list[Chunk]:
        self.ended = True
        return [
            *self._close_step(),
            {"type": "abort", "reason": str(data.get("reason") or "cancelled")},
        ]


_HANDLERS = {
    "run.started": ChunkMapper._started,
    "message.delta": ChunkMapper._delta,
    "message.completed": ChunkMapper._completed_text,
    "tool.call": ChunkMapper._tool_call,
    "tool.result": ChunkMapper._tool_result,
    "run.waiting": ChunkMapper._waiting,
    "run.resumed": ChunkMapper._resumed,
    "run.retrying": ChunkMapper._retrying,
    "run.completed": ChunkMapper._completed,
    "run.failed": ChunkMapper._failed,
    "run.cancelled": ChunkMapper._cancelled,
}


def _approval_call(name: Any, payload: Any) -> str | None:
    """The tool call an approval wait is about, or None for any other wait."""
    if (
        name == APPROVAL_WAIT
        and isinstance(payload, dict)
        and isinstance(payload.get("tool_call_id"), str)
    ):
        return payload["tool_call_id"]
    return None


def frame(seq: int, chunk: Chunk) -> bytes:
    """One SSE frame: the event's seq as ``id`` (several chunks of one event share it), LF only."""
    return b"id: %d\ndata: %s\n\n" % (seq, jsonb.dumps(chunk))


DONE = b"data: [DONE]\n\n"


_TEXT = frozenset({"message.delta", "message.completed"})


def without_retried_text(events: Sequence[tuple[int, str, Any]]) -> Sequence[tuple[int, str, Any]]:
    """The events less the text of every attempt that failed and was retried (its words are not
    the answer; the next attempt writes it again). Only what one read holds is seen: a live
    stream has already sent the text when the ``run.retrying`` comes."""
    if not any(type_ == "run.retrying" for _, type_, _ in events):
        return events
    kept: list[tuple[int, str, Any]] = []
    start = 0  # where the current attempt's events begin in ``kept``
    for event in events:
        if event[1] == "run.started":
            start = len(kept)
        elif event[1] == "run.retrying":
            kept[start:] = [e for e in kept[start:] if e[1] not in _TEXT]
        kept.append(event)
    return kept


# A token's stored data as PostgreSQL prints it, its text alone: the chunk takes that JSON
# string as it is, so most of a long answer's events are neither decoded nor encoded again.
_PLAIN_DELTA = re.compile(r'\{"text": ("(?:[^"\\]|\\.)*")\}')


def frames(mapper: ChunkMapper, events: Sequence[tuple[int, str, str]]) -> bytes:
    """The frames of stored events (data as JSON text), up to where the message ended."""
    out: list[bytes] = []
    for seq, type_, data in without_retried_text(events):
        if mapper.ended:
            break
        if type_ == "message.delta" and mapper.text_id is not None and (plain := _PLAIN_DELTA.fullmatch(data)):
            out.append(b'id: %d\ndata: {"type":"text-delta","id":"%s","delta":%s}\n\n'
                       % (seq, mapper.text_id.encode(), plain.group(1).encode()))
            continue
        out.extend(frame(seq, chunk) for chunk in mapper.map(seq, type_, jsonb.loads(data)))
    return b"".join(out)


def fold(message_id: str, chunks: Iterable[Chunk], metadata: Any = None) -> dict[str, Any]:
    """The ``UIMessage`` these chunks build, as ``useChat`` folds them (the history page's form)."""
    parts: list[dict[str, Any]] = []
    texts: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "text-start":
            texts[chunk["id"]] = {"type": "text", "text": "", "state": "streaming"}
            parts.append(texts[chunk["id"]])
        elif kind == "text-delta":
            texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind == "text-end":
            texts[chunk["id"]]["state"] = "done"
        elif kind == "tool-input-start":
            part = {
                "type": "dynamic-tool",
                "toolName": chunk["toolName"],
                "toolCallId": chunk["toolCallId"],
            }
            tools[chunk["toolCallId"]] = part | {"state": "input-streaming", "input": None}
            parts.append(tools[chunk["toolCallId"]])
        elif kind == "tool-input-available":
            tools[chunk["toolCallId"]].update(state="input-available", input=chunk["input"])
        elif kind == "tool-approval-request":
            tools[chunk["toolCallId"]].update(
                state="approval-requested", approval={"id": chunk["approvalId"]}
            )
        elif kind == "tool-output-available":
            tool = tools[chunk["toolCallId"]]
            if "approval" in tool:
                tool["approval"] = {"id": tool["approval"]["id"], "approved": True}
            tool.update(state="output-available", output=chunk["output"])
        elif kind == "tool-output-error":
            tools[chunk["toolCallId"]].update(state="output-error", errorText=chunk["errorText"])
        elif kind == "tool-output-denied":
            tool = tools[chunk["toolCallId"]]
            tool.update(
                state="output-denied",
                approval={"id": tool.get("approval", {}).get("id"), "approved": False},
            )
        elif kind.startswith("data-"):
            parts.append({"type": kind, "data": chunk["data"]})
    message: dict[str, Any] = {"id": message_id, "role": "assistant", "parts": parts}
    if metadata is not None:
        message["metadata"] = metadata
    return message
