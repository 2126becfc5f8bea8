"""What an OpenAI-compatible ``/v1/chat/completions`` answer looks like on the wire.

The one encoder of runq's stand-in models: the development model (``runq dev``), the scripted
fake of the tests and the bench's model servers all stream through it, so a change in the real
API's chunk shape is made once. Text goes out in content deltas of ``piece`` characters,
tool-call arguments split across chunks under their ``index`` (as the real API streams them),
then a chunk with ``finish_reason``, the usage chunk when the request asked for it
(``stream_options.include_usage``), and ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] | str  # a string is sent verbatim (e.g. invalid JSON)

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Answer:
    """One model response: its text, its tool calls, and (prompt, completion) token counts."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: tuple[int, int] | None = None
    piece: int = 4  # characters per content / arguments delta

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


class Chunks:
    """The chunks of one streamed response, sharing its id, creation time and model name."""

    def __init__(self, model: str, *, chunk_id: str | None = None, created: int | None = None) -> None:
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.chunk_id = chunk_id or f"chatcmpl-runq{self.created}"

    def event(self, delta: Mapping[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._data({"choices": [choice]})

    def usage(self, prompt: int, completion: int) -> bytes:
        counts = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return self._data({"choices": [], "usage": counts})

    def _data(self, fields: Mapping[str, Any]) -> bytes:
        chunk = {
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_runq",
            **fields,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def text(self, answer: Answer) -> Iterator[bytes]:
        """The role chunk and the text's content deltas."""
        yield self.event({"role": "assistant", "content": ""})
        for piece in _pieces(answer.text, answer.piece):
            yield self.event({"content": piece})

    def ending(self, answer: Answer, *, include_usage: bool) -> Iterator[bytes]:
        """The tool calls' deltas, the finish chunk, the usage chunk if asked for, ``[DONE]``."""
        for index, call in enumerate(answer.tool_calls):
            head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            yield self.event({"tool_calls": [head]})
            for piece in _pieces(call.arguments_json, answer.piece):
                yield self.event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield self.event({}, answer.finish_reason)
        if include_usage and answer.usage is not None:
            yield self.usage(*answer.usage)
        yield DONE

    def all(self, answer: Answer, *, include_usage: bool) -> Iterator[bytes]:
        yield from self.text(answer)
        yield from self.ending(answer, include_usage=include_usage)


def completion(answer: Answer, *, model: str) -> dict[str, Any]:
    """The same response unstreamed (``"stream": false``), as ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None, "refusal": None}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in answer.tool_calls
        ]
    prompt, completion_tokens = answer.usage or (0, 0)
    created = int(time.time())
    return {
        "id": f"chatcmpl-runq{created}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens},
    }


def error_body(message: str, *, kind: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}).encode()


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
