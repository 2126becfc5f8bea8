"""The development model's HTTP side: an ASGI app on 127.0.0.1, in a thread of its own.

:class:`ModelServer` reads each request, logs it and hands it to :meth:`ModelServer.respond`;
the development model answers from :mod:`app.devmodel.replies`, the tests' scripted fake
(``tests/fakes/openai_server.py``) from its script. ``GET /v1/models`` lists the one model, as
the real API does, for clients that look before they ask.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import uvicorn

from app.devmodel import replies
from app.devmodel.wire import Chunks, completion, error_body

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

DEV_MODEL = "runq-dev"
COMPLETIONS = "/v1/chat/completions"
STREAM_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass
class Request:
    body: dict[str, Any]
    authorization: str | None
    path: str = COMPLETIONS
    method: str = "POST"
    disconnected: bool = False  # the client closed the connection before the reply ended

    @property
    def include_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage"))


class ModelServer:
    """Serves OpenAI-compatible chat completions from a thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._closing = False
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        config = uvicorn.Config(
            self._app, interface="asgi3", log_level="warning", lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the model server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    async def respond(self, request: Request, receive: Receive, send: Send) -> None:
        """Answer one completions request; the development model's answer unless overridden."""
        answer = replies.answer(request.body)
        model = str(request.body.get("model") or DEV_MODEL)
        if not request.body.get("stream"):
            await send_json(send, 200, completion(answer, model=model))
            return
        await stream(send, Chunks(model).all(answer, include_usage=request.include_usage), pause_s=0.01)

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
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            await send_error(send, 400, "the body is not JSON")
            return
        request = Request(body, headers.get("authorization"), scope["path"], scope["method"])
        with self._lock:
            self.requests.append(request)
        if (scope["method"], scope["path"]) == ("GET", "/v1/models"):
            model = {"id": DEV_MODEL, "object": "model", "created": 0, "owned_by": "runq"}
            await send_json(send, 200, {"object": "list", "data": [model]})
        elif (scope["method"], scope["path"]) != ("POST", COMPLETIONS):
            await send_error(send, 404, f"no route {scope['method']} {scope['path']}")
        else:
            await self.respond(request, receive, send)

    async def wait_for_disconnect(self, receive: Receive) -> bool:
        """Hold a stream open; True once the client hangs up, False if the server closes first."""
        received = asyncio.ensure_future(receive())
        while not self._closing:
            done, _ = await asyncio.wait({received}, timeout=0.02)
            if done:
                if received.result()["type"] == "http.disconnect":
                    return True
                received = asyncio.ensure_future(receive())
        received.cancel()
        return False


async def stream(send: Send, chunks: Iterable[bytes], *, pause_s: float, end: bool = True) -> None:
    """Send an SSE response chunk by chunk, ``pause_s`` apart, as a real token stream arrives."""
    await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
    for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await asyncio.sleep(pause_s)
    if end:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def send_json(send: Send, status: int, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, json.dumps(body).encode(), headers)


async def send_error(send: Send, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, error_body(message), headers)


async def send_bytes(send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]) -> None:
    start = [(b"content-type", b"application/json"), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})

