"""The ``openai`` agent's shared HTTP connections to a model provider, and how its answer is read.

One pooled ``aiohttp.ClientSession`` per worker process, event loop and base URL, so runs reuse
connections. aiohttp, not httpx, because a streamed turn is one small read per token: its C
parser and plain asyncio protocol read a chunk for about a third of httpx's CPU (httpcore's h11
and anyio layers were most of a streaming worker's samples). No cap of its own;
``RUNQ_OPENAI_MAX_CONNECTIONS`` sets one, and a turn that waits for it is logged and counted
(``runq_model_pool_wait_seconds``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from app.agents.base import FatalError
from app.guards.redact import redact
from app.metrics import MODEL_POOL_WAIT


class TransientModelError(Exception):
    """A model error worth retrying inside the run (connection, 429, 5xx)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # between two reads of a turn's stream, not for the whole turn
POOL_TIMEOUT_S = 30.0
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _ModelConnections]] = (
    weakref.WeakKeyDictionary()
)

log = logging.getLogger(__name__)


class _ModelConnections:
    """The pooled client for one base URL and, when capped, the slots a model turn waits for."""

    def __init__(self, base_url: str, limit: int | None) -> None:
        self.client = aiohttp.ClientSession(
            base_url,
            connector=aiohttp.TCPConnector(limit=limit or 0),  # 0: no cap
            timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S),
            trust_env=True,  # HTTPS_PROXY and friends, as httpx had them
        )
        self.limit = limit
        self.waiting = 0  # turns queued for a slot right now
        # In front of aiohttp's own pool (of the same size), which then never has to queue: a
        # wait here is seen, timed and bounded.
        self._slots = asyncio.Semaphore(limit) if limit else None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[aiohttp.ClientSession]:
        if self._slots is None:
            yield self.client
            return
        if self._slots.locked():
            await self._wait_for_slot(self._slots)
        else:
            await self._slots.acquire()
        try:
            yield self.client
        finally:
            self._slots.release()

    async def _wait_for_slot(self, slots: asyncio.Semaphore) -> None:
        started = time.monotonic()
        self.waiting += 1
        try:
            async with asyncio.timeout(POOL_TIMEOUT_S):
                await slots.acquire()
        except TimeoutError:
            raise TransientModelError(
                f"no model connection free within {POOL_TIMEOUT_S:.0f} s"
                f" (RUNQ_OPENAI_MAX_CONNECTIONS={self.limit})"
            ) from None
        finally:
            self.waiting -= 1
            waited = time.monotonic() - started
            MODEL_POOL_WAIT.observe(waited)
        log.warning(
            "waited %.0f ms for a model connection (RUNQ_OPENAI_MAX_CONNECTIONS=%d in use)",
            waited * 1000,
            self.limit,
        )


def model_connections(base_url: str, limit: int | None) -> _ModelConnections:
    """The process's connections to ``base_url`` on the running loop (a client is bound to its loop)."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(base_url)
    if found is None or found.client.closed:
        found = per_loop[base_url] = _ModelConnections(base_url, limit)
    return found


async def close_shared_clients() -> None:
    """Close the running loop's shared clients (worker shutdown, test teardown)."""
    for found in _clients.pop(asyncio.get_running_loop(), {}).values():
        await found.client.close()


async def sse_data(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE response, as they arrive.

    Split here from whatever each read brought, not line by line through the client's reader:
    a read usually holds one whole event, and a line has no length limit.
    """
    pending = b""
    async for data in response.content.iter_any():
        lines = (pending + data).splitlines()  # \n, \r\n and \r, as SSE allows
        pending = b"" if data.endswith((b"\n", b"\r")) else lines.pop()
        for line in lines:
            if line.startswith(b"data:"):  # not blank separators, ": keep-alive", "event:"
                yield line[5:].strip()
    if pending.startswith(b"data:"):
        yield pending[5:].strip()


def http_error(status: int, headers: Mapping[str, str], body: bytes) -> Exception:
    """408, 429 and 5xx are transient; any other status is the request's fault and fatal."""
    message = f"HTTP {status}: {provider_message(_json_or_text(body))}"
    if status in (408, 429) or status >= 500:
        return TransientModelError(message, retry_after=_retry_after(headers))
    return FatalError(redact(f"model request failed with {message}"), code="model_error")


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        return body.decode(errors="replace")


def provider_message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:1000]
    return (body if isinstance(body, str) else json.dumps(body))[:1000] or "no message"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (OpenAI), else ``Retry-After`` as seconds or an HTTP date (``headers``
    looked up case-insensitively, as aiohttp's are)."""
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (ValueError, TypeError):
        return None
