"""What a request body may be: JSON, and no larger than the limit.

A body sent as another media type (a form, text/plain, none named) is refused with ``415`` before
it is read: validation would only say "Input should be a valid dictionary". A declared ``Content-Length`` over the limit is refused before reading a byte; a chunked body
is counted as it arrives and refused as soon as it passes the limit. The accepted body (at
most the limit) is buffered and replayed to the app.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import problem_response

JSON_TYPES = ("application/json",)


class JsonBodies:
    """Answer ``415 unsupported_media_type`` for a non-empty body whose Content-Type is not JSON
    (``application/json`` or a ``+json`` suffix); every route of the API that takes a body takes JSON."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _has_body(scope) and not is_json(scope):
            response = problem_response(
                415,
                "unsupported_media_type",
                "send the request body as JSON, with Content-Type: application/json",
                instance=scope.get("path"),
                headers={"Accept-Post": "application/json"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    length = headers.get(b"content-length")
    return (length is not None and length.strip() not in (b"", b"0")) or b"transfer-encoding" in headers


def is_json(scope: Scope) -> bool:
    media = dict(scope["headers"]).get(b"content-type", b"").split(b";", 1)[0].strip().lower().decode("latin-1")
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


class BodySizeLimit:
    """Answer ``413 body_too_large`` for a body over ``max_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413,
            "body_too_large",
            f"the request body is larger than {self.max_bytes} bytes",
            instance=scope.get("path"),
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)
