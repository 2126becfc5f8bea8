"""A deliberately small HTTP/1.1 client on asyncio streams: keep-alive JSON POSTs and SSE.

The load generator shares two cores with the API, the workers and PostgreSQL: every cycle
it spends parsing is taken from the system under test, so it does the least work that
still reads every response completely (httpx costs several times more per request).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Frame:
    seq: int
    event: str
    data: bytes  # the ``data:`` line as sent (one line: the API sends compact JSON)
    received: float  # time.time() when its chunk arrived


class HttpError(RuntimeError):
    """A response other than the one expected."""


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    host: str

    async def request(
        self, method: str, path: str, *, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(head.encode() + b"\r\n" + body)
        status, fields = await self._read_head()
        length = int(fields.get("content-length", "0"))
        return status, await self.reader.readexactly(length)

    async def _read_head(self) -> tuple[int, dict[str, str]]:
        status_line = await self.reader.readline()
        if not status_line:
            raise HttpError("the server closed the connection")
        fields = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), fields

    async def events(self, path: str, *, headers: Mapping[str, str]) -> AsyncIterator[tuple[int, float]]:
        """``(seq, time.time() at receipt)`` for every SSE frame until the server ends it."""
        async for frame in self.frames(path, headers=headers):
            yield frame.seq, frame.received

    async def frames(
        self, path: str, *, headers: Mapping[str, str], method: str = "GET", body: bytes = b""
    ) -> AsyncIterator[Frame]:
        """Every SSE frame (with an ``id``) until the server ends the stream; a POST that
        answers with a stream (the AI SDK's chat) sends ``body`` as JSON."""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept: text/event-stream\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(head.encode() + b"\r\n" + body)
        status, fields = await self._read_head()
        if status != 200:
            raise HttpError(f"{method} {path}: {status}")
        if fields.get("transfer-encoding") != "chunked":
            raise HttpError("expected a chunked event stream")
        seq, event, data = None, b"", b""
        while True:
            size = int((await self.reader.readline()).strip() or b"0", 16)
            if size == 0:
                return
            chunk = await self.reader.readexactly(size + 2)
            received = time.time()
            for line in chunk.split(b"\n"):
                line = line.rstrip(b"\r")
                if line.startswith(b"id:"):
                    seq = int(line[3:])
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
                elif line.startswith(b"data:"):
                    data = line[5:].strip()
                elif not line and seq is not None:
                    yield Frame(seq, event.decode(), data, received)
                    seq, event, data = None, b"", b""


@asynccontextmanager
async def connection(host: str, port: int) -> AsyncIterator[Connection]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        yield Connection(reader, writer, f"{host}:{port}")
    finally:
        writer.close()


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


async def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:``port`` answers ``GET path`` with 200 (false while nothing listens)."""
    try:
        async with connection("127.0.0.1", port) as conn:
            status, _ = await conn.request("GET", path, headers={})
            return status == 200
    except OSError:
        return False
