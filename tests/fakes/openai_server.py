"""A fake OpenAI-compatible ``/chat/completions`` server: real HTTP on localhost, scripted replies.

Each request takes the next scripted :class:`Reply` and is streamed back as the real API does it
(a request without ``stream`` gets it as one ``chat.completion``):
``data: {chat.completion.chunk}`` events, text in small content deltas, tool-call arguments split
across chunks under their ``index``, a final chunk with ``finish_reason``, then ``data: [DONE]``.
Every request is logged with its JSON body and whether the client hung up before the reply ended.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] | str  # a string is sent verbatim (e.g. invalid JSON)


@dataclass(frozen=True)
class Reply:
    """One scripted response. ``stall`` keeps the stream open after the text until the client
    leaves; ``status`` other than 200 answers with an OpenAI-style error body instead."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    status: int = 200
    error: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    stall: bool = False
    piece: int = 4  # characters per content / arguments delta
    midway: threading.Event | None = None  # set: the second half of the stream may go
    # (prompt_tokens, completion_tokens) sent as the last chunk when the request asks for
    # stream_options.include_usage, as the real API does; None: this model sends no usage
    usage: tuple[int, int] | None = None


def answer(text: str, *, usage: tuple[int, int] | None = None) -> Reply:
    return Reply(text=text, usage=usage)


def calls(*tool_calls: ToolCall, text: str = "", usage: tuple[int, int] | None = None) -> Reply:
    return Reply(text=text, tool_calls=tool_calls, usage=usage)


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply(
        status=status, error=message, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


def stall(text: str) -> Reply:
    return Reply(text=text, stall=True)


@dataclass
class Request:
    body: dict[str, Any]
    authorization: str | None
    disconnected: bool = False  # the client closed the connection before the reply ended


class FakeOpenAI:
    """Serve scripted replies from a thread; ``base_url`` ends in ``/v1`` like the real one."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = False
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self._app,
            interface="asgi3",
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        """Forget the log and any unused script (a server shared by several tests)."""
        with self._lock:
            self.requests.clear()
            self._script.clear()

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    # -- the ASGI app ---------------------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        request = Request(body=json.loads(raw or b"{}"), authorization=headers.get("authorization"))
        with self._lock:
            self.requests.append(request)
            reply = self._script.popleft() if self._script else None
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            reply = Reply(status=404, error=f"no route {scope['method']} {scope['path']}")
        elif reply is None:
            reply = Reply(
                status=400, error=f"fake server: no scripted reply for request {len(self.requests)}"
            )
        if reply.status != 200:
            await self._send_error(send, reply)
            return
        if not request.body.get("stream"):
            await self._send_whole(send, reply, model=request.body.get("model", ""))
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        chunks = list(_chunks(reply, model=request.body.get("model", ""), include_usage=include_usage))
        for i, chunk in enumerate(chunks):
            if reply.midway is not None and i == len(chunks) // 2:
                await asyncio.to_thread(reply.midway.wait, 60)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0.002)  # separate TCP writes, as a real token stream arrives
        if reply.stall:
            request.disconnected = await self._wait_for_disconnect(receive)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_whole(self, send: Send, reply: Reply, *, model: str) -> None:
        """A request without ``stream``: the reply as one ``chat.completion``."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _arguments(call)}}
                for call in reply.tool_calls
            ]
        completion: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        }  # fmt: skip
        if reply.usage is not None:
            prompt, completion_tokens = reply.usage
            completion["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                                   "total_tokens": prompt + completion_tokens}  # fmt: skip
        body = json.dumps(completion).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    async def _send_error(self, send: Send, reply: Reply) -> None:
        body = json.dumps(
            {
                "error": {
                    "message": reply.error,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
        ).encode()
        headers = [(b"content-type", b"application/json")]
        headers += [(k.encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _wait_for_disconnect(self, receive: Receive) -> bool:
        """Hold the stream open; True once the client hangs up, False if the server closes first."""
        received = asyncio.ensure_future(receive())
        while not self._closing:
            done, _ = await asyncio.wait({received}, timeout=0.02)
            if done:
                if received.result()["type"] == "http.disconnect":
                    return True
                received = asyncio.ensure_future(receive())
        received.cancel()
        return False


def _chunks(reply: Reply, *, model: str, include_usage: bool = False) -> Iterator[bytes]:
    """The reply as the real API streams it."""
    created = int(time.time())
    chunk_id = f"chatcmpl-fake{created}"

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def pieces(text: str) -> list[str]:
        return [text[i : i + reply.piece] for i in range(0, len(text), reply.piece)]

    yield event({"role": "assistant", "content": "", "refusal": None})
    for piece in pieces(reply.text):
        yield event({"content": piece})
    if reply.stall:
        return
    for index, call in enumerate(reply.tool_calls):
        arguments = _arguments(call)
        yield event(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in pieces(arguments):
            yield event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield event({}, "tool_calls" if reply.tool_calls else "stop")
    if include_usage and reply.usage is not None:
        prompt, completion = reply.usage
        chunk = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _arguments(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
