"""runq's stored events as AG-UI events (docs/frontends-ag-ui.md): a pure, stateful translation.

One :class:`Segment` translates one AG-UI run: from where its stream starts to the first
ending — the run's terminal event, or a wait (``RUN_FINISHED`` with an interrupt outcome; the
resume is a new AG-UI run). ``@ag-ui/client`` refuses ``RUN_FINISHED`` while a message or step
is open, merges messages and tool calls by id across every run of a thread, and rejects
``null`` in optional fields, so every id is derived from runq's run id (unique per thread) and
the log, open things are closed before each ending and retry, and absent values are left out.
A replay translates the same events the same way: it is byte-identical to the live stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.db import jsonb

Event = dict[str, Any]

TERMINAL_TYPES = frozenset({"run.completed", "run.cancelled", "run.failed"})


def text_message_id(run_id: str, seq: int) -> str:
    """A text message: the run and the seq of its first delta."""
    return f"{run_id}:{seq}"


def result_message_id(run_id: str, seq: int) -> str:
    """The tool message ``TOOL_CALL_RESULT`` mints (never equal to a text message's id)."""
    return f"{run_id}:{seq}:result"


def tool_call_id(run_id: str, call_id: str) -> str:
    """The agent's own call ids repeat across runs (the demo's ``step_1``); the run id makes
    them unique in the thread, and ``/`` keeps them apart from the message ids."""
    return f"{run_id}/{call_id}"


@dataclass(slots=True)
class Segment:
    """The translation state of one AG-UI run over runq run ``run_id``.

    ``thread_id`` and ``client_run_id`` are the ids the client sent (``RUN_STARTED`` and
    ``RUN_FINISHED`` echo them); the ids inside the stream come from ``run_id`` and the log.
    ``runq_thread_id`` is the run's thread in runq (none for a run outside a thread).
    """

    thread_id: str
    client_run_id: str
    run_id: str
    runq_thread_id: str | None = None
    step: str | None = None  # the open STEP_STARTED (one per attempt)
    message: str | None = None  # the open text message
    parent: str | None = None  # the attempt's last text message, until a tool result
    shown: set[str] = field(default_factory=set)  # tool calls already sent (a retry repeats them)
    ended: bool = False

    def prelude(self) -> list[Event]:
        """What opens the stream: ``RUN_STARTED``, runq's ids, and whatever was open at the
        cursor again (a stream resumed mid-message continues that message)."""
        ids = {"run_id": self.run_id} | ({"thread_id": self.runq_thread_id} if self.runq_thread_id else {})
        events: list[Event] = [
            {"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.client_run_id},
            {"type": "CUSTOM", "name": "runq.run", "value": ids},
        ]
        if self.step is not None:
            events.append({"type": "STEP_STARTED", "stepName": self.step})
        if self.message is not None:
            events.append({"type": "TEXT_MESSAGE_START", "messageId": self.message, "role": "assistant"})
        return events

    def translate(self, seq: int, type_: str, data: Mapping[str, Any]) -> list[Event]:
        """The AG-UI events for runq event ``seq``; nothing once the segment has ended."""
        if self.ended:
            return []
        handler = _HANDLERS.get(type_)
        if handler is None:
            return [_custom(type_, data)]
        return handler(self, seq, data)

    def catch_up(self, events: Iterable[tuple[int, str, Mapping[str, Any]]]) -> None:
        """Take in the events before the cursor without sending them, so a stream that starts
        mid-run knows what is open (and which tool calls were shown). An ending before the
        cursor closed everything; what follows it belongs to the next AG-UI run."""
        for seq, type_, data in events:
            self.translate(seq, type_, data)
            self.ended = False

    # -- the handlers, one per runq event type -------------------------------------------------

    def _started(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        events = self._close()
        self.step = f"attempt {data.get('attempt', 1)}"
        self.parent = None
        return [*events, {"type": "STEP_STARTED", "stepName": self.step}]

    def _delta(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        text = str(data.get("text") or "")
        if not text:
            return []
        events = [] if self.message is not None else self._open_message(seq)
        assert self.message is not None
        return [*events, {"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message, "delta": text}]

    def _completed_message(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        if self.message is None:  # an agent that sends the whole text at once
            events = self._open_message(seq)
            text = str(data.get("text") or "")
            if text:
                events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message, "delta": text})
        return events + self._close_message()

    def _tool_call(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        return self._show_call(str(data.get("tool_call_id", seq)), data.get("name"), data.get("arguments"))

    def _tool_result(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        events = self._close_message()
        self.parent = None
        result: Event = {
            "type": "TOOL_CALL_RESULT",
            "messageId": result_message_id(self.run_id, seq),
            "toolCallId": tool_call_id(self.run_id, str(data.get("tool_call_id", seq))),
            "content": _text(data.get("output")),
            "role": "tool",
        }
        if data.get("is_error"):
            result["metadata"] = {"is_error": True}
        return [*events, result]

    def _retrying(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        return [*self._close(), _custom("run.retrying", data)]

    def _waiting(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        payload = data.get("payload")
        interrupt: Event = {"id": str(data.get("waitpoint_id")), "reason": str(data.get("name") or "wait")}
        events: list[Event] = []
        if isinstance(payload, Mapping) and payload.get("tool_call_id") is not None:
            # An approval: the tool call it asks about, shown now if no tool.call showed it yet.
            call = str(payload["tool_call_id"])
            events = self._show_call(call, payload.get("name"), payload.get("arguments"))
            interrupt["toolCallId"] = tool_call_id(self.run_id, call)
        if data.get("expires_at") is not None:
            interrupt["expiresAt"] = str(data["expires_at"])
        if payload is not None:
            interrupt["metadata"] = {"payload": payload}
        return [*events, *self._finish({"type": "interrupt", "interrupts": [interrupt]})]

    def _run_completed(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        return self._finish({"type": "success"}, result=data.get("output"))

    def _run_cancelled(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        events = self._close()
        return [*events, _custom("run.cancelled", data), *self._finish({"type": "cancelled"})]

    def _run_failed(self, seq: int, data: Mapping[str, Any]) -> list[Event]:
        events = self._close()
        self.ended = True
        code = str(data.get("error_code") or "failed")
        error: Event = {"type": "RUN_ERROR", "message": str(data.get("error_message") or code), "code": code}
        return [*events, error]

    # -- building blocks -----------------------------------------------------------------------

    def _open_message(self, seq: int) -> list[Event]:
        self.message = self.parent = text_message_id(self.run_id, seq)
        return [{"type": "TEXT_MESSAGE_START", "messageId": self.message, "role": "assistant"}]

    def _close_message(self) -> list[Event]:
        if self.message is None:
            return []
        message, self.message = self.message, None
        return [{"type": "TEXT_MESSAGE_END", "messageId": message}]

    def _show_call(self, call: str, name: Any, arguments: Any) -> list[Event]:
        call_id = tool_call_id(self.run_id, call)
        if call_id in self.shown:
            return []
        self.shown.add(call_id)
        start: Event = {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": str(name or "tool")}
        if self.parent is not None:
            start["parentMessageId"] = self.parent
        events = [*self._close_message(), start]
        args = arguments if isinstance(arguments, str) else jsonb.dumps(arguments if arguments is not None else {}).decode()
        if args:
            events.append({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args})
        events.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
        return events

    def _close(self) -> list[Event]:
        events = self._close_message()
        if self.step is not None:
            events.append({"type": "STEP_FINISHED", "stepName": self.step})
            self.step = None
        return events

    def _finish(self, outcome: Event, *, result: Any = None) -> list[Event]:
        events = self._close()
        self.ended = True
        finished: Event = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.client_run_id}
        if result is not None:
            finished["result"] = result
        finished["outcome"] = outcome
        return [*events, finished]


def _custom(type_: str, data: Mapping[str, Any]) -> Event:
    return {"type": "CUSTOM", "name": f"runq.{type_}", "value": dict(data)}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else jsonb.dumps(value).decode()


_HANDLERS = {
    "run.started": Segment._started,
    "message.delta": Segment._delta,
    "message.completed": Segment._completed_message,
    "tool.call": Segment._tool_call,
    "tool.result": Segment._tool_result,
    "run.retrying": Segment._retrying,
    "run.waiting": Segment._waiting,
    "run.completed": Segment._run_completed,
    "run.cancelled": Segment._run_cancelled,
    "run.failed": Segment._run_failed,
}


def frames(seq: int, events: Iterable[Event]) -> bytes:
    """SSE frames, each with ``id: <seq>`` of the runq event it came from, ending in LF only
    (``@ag-ui/client`` splits frames on ``\\n\\n``; sse-starlette's CRLF would break it)."""
    return b"".join(b"id: %d\ndata: %s\n\n" % (seq, jsonb.dumps(e)) for e in events)


# A token's stored data as PostgreSQL prints it, its text alone (not empty): the frame takes
# that JSON string as it is, so most of a long answer's events are neither decoded nor encoded.
_PLAIN_DELTA = re.compile(r'\{"text": ("(?:[^"\\]|\\.)+")\}')


def translate_page(segment: Segment, events: Iterable[tuple[int, str, str]]) -> bytes:
    """The frames for a page of stored events ``(seq, type, data as JSON text)``."""
    out: list[bytes] = []
    for seq, type_, data in events:
        if type_ == "message.delta" and segment.message is not None and not segment.ended:
            plain = _PLAIN_DELTA.fullmatch(data)
            if plain:
                out.append(b'id: %d\ndata: {"type":"TEXT_MESSAGE_CONTENT","messageId":"%s","delta":%s}\n\n'
                           % (seq, segment.message.encode(), plain.group(1).encode()))
                continue
        out.append(frames(seq, segment.translate(seq, type_, jsonb.loads(data))))
    return b"".join(out)
