"""A real HTTP receiver for webhook tests (127.0.0.0/8 and [::1] only) and an independent
check of Standard Webhooks signatures (hmac and base64 by hand, not the package runq signs with)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

HANG: Literal["hang"] = "hang"


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """An HTTP/1.1 server answering each request with the next of ``answers`` (a status code
    or :data:`HANG`, which never answers), then ``default``. Every request is recorded on
    arrival, before it is answered."""

    def __init__(self, host: str = "127.0.0.1", answers: list[int | str] | None = None, default: int | str = 200) -> None:
        self.host = host
        self.answers = list(answers or [])
        self.default = default
        self.requests: list[Received] = []
        self.hanging = 0
        self._server: asyncio.Server | None = None
        self._release = asyncio.Event()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}/hooks"

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if ":" in line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Received(headers, body))
            answer = self.answers.pop(0) if self.answers else self.default
            if answer == HANG:
                self.hanging += 1
                await self._release.wait()
                return
            writer.write(f"HTTP/1.1 {answer} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def verify_signature(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """The Standard Webhooks check, written from the specification: HMAC-SHA256 keyed with the
    base64 after ``whsec_``, over ``id.timestamp.body``; any one ``v1,`` signature may match."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(value, expected)
        for version, _, value in (sig.partition(",") for sig in headers["webhook-signature"].split(" "))
    )


class FakeResolver:
    """Host names to addresses without DNS; a name not listed does not resolve."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.names:
            raise OSError(f"{host} does not resolve")
        return self.names[host]
