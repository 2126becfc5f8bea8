"""``POST /ai-sdk/chat`` bodies of any length: the route gets the body with only the last message.

``DefaultChatTransport`` resends every earlier message with each new one, although runq keeps the
history itself and reads only the last message: a long chat (one 90 KB answer in it) outgrew
``RUNQ_MAX_BODY_BYTES`` and every later message was refused with ``413``. This middleware reads
such a body as it arrives with a streaming JSON parser (ijson), keeps every top-level field but
``messages`` and the last message alone, and hands the route that much smaller body, so the
route, its validation and ``RUNQ_MAX_BODY_BYTES`` stay as for any other request. A body within
``RUNQ_MAX_BODY_BYTES`` is passed on untouched (yajl, ijson's fast parser, reads a lone surrogate
escape as ``?``; the route's validation refuses it in a body it reads itself).

Bounds: the whole body at most ``RUNQ_CHAT_MAX_BODY_BYTES`` (what a client may make the API read
and parse), and each message or other field at most ``RUNQ_MAX_BODY_BYTES`` (what it may make the
API hold: one message at a time, never the history).
"""

from __future__ import annotations

import json
from typing import Any

import ijson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.limits import is_json
from app.api.problems import problem_response

CHAT_PATH = "/ai-sdk/chat"
ARRAY_ITEM = "messages.item"  # ijson's prefix of an element of the top-level `messages`


class BodyRefused(Exception):
    """The body is over a bound, or not JSON; ``status``, ``code`` and ``detail`` say which."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


class LongChats:
    """Reduce ``POST /ai-sdk/chat`` bodies to their last message (module docstring)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_item_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_item_bytes = max_item_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == CHAT_PATH and is_json(scope)):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        body = _Body(receive, self.max_bytes, self._too_large)
        try:
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise self._too_large()
            if await body.fits(self.max_item_bytes):  # as any other body: left as it is
                await self.app(scope, body.replay, send)
                return
            reduced = await self._reduce(body)
        except BodyRefused as refused:
            close = {"Connection": "close"} if refused.status == 413 else None
            response = problem_response(refused.status, refused.code, refused.detail, instance=CHAT_PATH, headers=close)
            await response(scope, receive, send)
            return
        except _ClientLeft:
            return
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-length", b"transfer-encoding")]
        headers.append((b"content-length", str(len(reduced)).encode()))
        body.head = reduced
        await self.app({**scope, "headers": headers}, body.replay, send)

    async def _reduce(self, body: _Body) -> bytes:
        """The body with ``messages`` cut to its last item, every value bounded as it is built."""
        kept: dict[str, Any] = {}
        last: list[Any] = []
        builder: _Bounded | None = None
        key = ""
        try:
            async for prefix, event, value in ijson.parse_async(body, use_float=True):  # yajl2_c: ~10 ms a MiB of text
                if builder is None:
                    if prefix == "" and event in ("start_map", "end_map"):
                        continue  # the body's own braces
                    if prefix == "" and event == "map_key":
                        key = value
                        continue
                    if prefix == "messages" and event in ("start_array", "end_array"):
                        kept.setdefault("messages", last)  # the array: only its last item is kept
                        continue
                    builder = _Bounded(self.max_item_bytes, "messages" if prefix == ARRAY_ITEM else key)
                builder.event(event, value)
                if builder.depth:
                    continue
                if prefix == ARRAY_ITEM:
                    last[:] = [builder.value]
                elif prefix == "":
                    return json.dumps(builder.value).encode()  # not an object: the route's validation says so
                else:
                    kept[key] = builder.value
                builder = None
        except ijson.JSONError as exc:
            raise BodyRefused(400, "malformed_json", "the request body is not valid JSON") from exc
        return json.dumps(kept).encode()

    def _too_large(self) -> BodyRefused:
        return BodyRefused(
            413,
            "body_too_large",
            f"the chat request is larger than {self.max_bytes} bytes (RUNQ_CHAT_MAX_BODY_BYTES); send only"
            " the new message (prepareSendMessagesRequest): runq keeps the history",
        )


class _ClientLeft(Exception):
    """The client hung up before its body ended."""


class _Body:
    """The request body as the file ijson reads, counted against the bound as it comes."""

    def __init__(self, receive: Receive, max_bytes: int, too_large: Any) -> None:
        self.receive = receive
        self.max_bytes = max_bytes
        self.too_large = too_large
        self.read_bytes = 0
        self.ended = False
        self.head = b""  # what fits() read, before read() goes on

    async def fits(self, limit: int) -> bool:
        """Read up to ``limit`` bytes; whether that was the whole body."""
        while not self.ended and len(self.head) <= limit:
            self.head += await self._next()
        return self.ended and len(self.head) <= limit

    async def replay(self) -> Message:
        """The body kept in ``head`` (all of a body that :meth:`fits`, or its reduction), as the
        app's ``receive``; then the client's own messages (its disconnect)."""
        body, self.head = self.head, b""
        return {"type": "http.request", "body": body, "more_body": False} if body else await self.receive()

    async def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""  # ijson's look at the type of what read() returns
        if self.head:
            chunk, self.head = self.head, b""
            return chunk
        return await self._next()

    async def _next(self) -> bytes:
        chunk = b""
        while not chunk and not self.ended:  # b"" tells ijson the body ended
            message = await self.receive()
            if message["type"] != "http.request":
                raise _ClientLeft
            chunk = message.get("body", b"")
            self.read_bytes += len(chunk)
            if self.read_bytes > self.max_bytes:
                raise self.too_large()
            self.ended = not message.get("more_body", False)
        return chunk


class _Bounded:
    """An ijson object builder that refuses a value once its strings pass ``max_bytes``."""

    def __init__(self, max_bytes: int, field: str) -> None:
        self.builder = ijson.ObjectBuilder()
        self.max_bytes = max_bytes
        self.field = field
        self.size = 0
        self.depth = 0

    def event(self, event: str, value: Any) -> None:
        self.size += len(value) if isinstance(value, str) else 8
        if self.size > self.max_bytes:
            what = "a message" if self.field == "messages" else f"`{self.field}`"
            raise BodyRefused(
                413, "body_too_large", f"{what} of the chat request is larger than {self.max_bytes} bytes (RUNQ_MAX_BODY_BYTES)"
            )
        self.depth += event in ("start_map", "start_array")
        self.depth -= event in ("end_map", "end_array")
        self.builder.event(event, value)

    @property
    def value(self) -> Any:
        return self.builder.value
