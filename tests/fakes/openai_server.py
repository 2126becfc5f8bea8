"""A scripted OpenAI-compatible ``/chat/completions`` server: the development model's HTTP side
(:mod:`app.devmodel.server`) answering from a script instead of from the request.

Each request takes the next scripted :class:`Reply` and is streamed back by the shared encoder
(:mod:`app.devmodel.wire`); a request without ``stream`` gets it as one ``chat.completion``. Every request is logged with its JSON body and whether the client
hung up before the reply ended.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.devmodel.server import ModelServer, Receive, Request, Send, send_error, send_json, stream
from app.devmodel.wire import Answer, Chunks, ToolCall, completion

__all__ = ["FakeOpenAI", "Reply", "Request", "ToolCall", "answer", "calls", "error", "stall"]


@dataclass(frozen=True)
class Reply(Answer):
    """One scripted response. ``stall`` keeps the stream open after the text until the client
    leaves; ``status`` other than 200 answers with an OpenAI-style error body instead.
    ``usage`` is sent only when the request asks for it, as the real API does; None: this model
    sends no usage."""

    status: int = 200
    error: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    stall: bool = False
    midway: threading.Event | None = None  # set: the second half of the stream may go


def answer(text: str, *, usage: tuple[int, int] | None = None) -> Reply:
    return Reply(text=text, usage=usage)


def calls(*tool_calls: ToolCall, text: str = "", usage: tuple[int, int] | None = None) -> Reply:
    return Reply(text=text, tool_calls=tool_calls, usage=usage)


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status=status, error=message, headers={k.replace("_", "-"): v for k, v in headers.items()})


def stall(text: str) -> Reply:
    return Reply(text=text, stall=True)


class FakeOpenAI(ModelServer):
    """Serve scripted replies from a thread; ``base_url`` ends in ``/v1`` like the real one."""

    def __init__(self) -> None:
        super().__init__()
        self._script: deque[Reply] = deque()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        """Forget the log and any unused script (a server shared by several tests)."""
        with self._lock:
            self.requests.clear()
            self._script.clear()

    def __enter__(self) -> FakeOpenAI:
        super().__enter__()
        return self

    async def respond(self, request: Request, receive: Receive, send: Send) -> None:
        with self._lock:
            reply = self._script.popleft() if self._script else None
        if reply is None:
            reply = Reply(status=400, error=f"fake server: no scripted reply for request {len(self.requests)}")
        if reply.status != 200:
            headers = [(k.encode(), v.encode()) for k, v in reply.headers.items()]
            await send_error(send, reply.status, reply.error, headers)
            return
        if not request.body.get("stream"):  # a client that does not stream gets one chat.completion
            await send_json(send, 200, completion(reply, model=str(request.body.get("model", ""))))
            return
        chunks = Chunks(str(request.body.get("model", "")))
        if reply.stall:
            await stream(send, chunks.text(reply), pause_s=0.002, end=False)
            request.disconnected = await self.wait_for_disconnect(receive)
            return
        sent = list(chunks.all(reply, include_usage=request.include_usage))
        if reply.midway is None:
            await stream(send, sent, pause_s=0.002)
            return
        half = len(sent) // 2
        await stream(send, sent[:half], pause_s=0.002, end=False)
        await asyncio.to_thread(reply.midway.wait, 60)
        for chunk in sent[half:]:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0.002)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
