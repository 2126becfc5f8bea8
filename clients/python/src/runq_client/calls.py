"""Requests and their answers without I/O: what to send, whether to retry, what came back.

Every API operation is a :class:`Call` (built in :mod:`runq_client.operations`); the sync and the
async client only move its bytes, so the rules below hold for both.

Retry rules: a ``429`` or ``503`` says the server did nothing, and a connection that never opened
sent nothing, so those are retried for every call. A ``5xx``, a dropped connection or a timeout
after the request went out may have had an effect, so only idempotent calls retry them (reads,
and creates that carry an ``Idempotency-Key``: the server answers a repeat with the run it
already made).
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from runq_client._version import __version__
from runq_client.errors import RunqConnectionError, RunqError

T = TypeVar("T")

PROBLEM_TYPES = ("application/problem+json", "application/json")
UNPROCESSED = frozenset({429, 503})
# The server sends a keep-alive at least every 15 s: a stream silent for twice that is dead (a
# half-open connection, a proxy that stalls), so it is closed and resumed after the last seq.
SILENCE_TIMEOUT_S = 30.0
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One HTTP exchange and how to read its success."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, str | int] | None = None
    body: Any = None
    has_body: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": self.params, "headers": dict(self.headers)}
        if self.has_body:
            kwargs["json"] = self.body
        return kwargs

    def result(self, status: int, content: bytes) -> T:
        """The parsed answer of a ``2xx``; :class:`RunqError` for anything else."""
        if not 200 <= status < 300:
            raise problem(status, content)
        if status == 204 or not content:
            return self.parse(None)
        try:
            return self.parse(json.loads(content))
        except ValueError as exc:
            raise RunqError(status, "invalid_response", "the answer is not JSON") from exc


def problem(status: int, content: bytes) -> RunqError:
    """The RFC 9457 problem in an error answer (or as much of one as there is)."""
    try:
        body = json.loads(content) if content else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code") or f"http_{status}")
    detail = str(body.get("detail") or body.get("title") or content[:200].decode("utf-8", "replace"))
    return RunqError(status, code, detail, problem=body)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait: exponential back-off with jitter, capped;
    ``Retry-After`` wins when the server sends it (up to ``max_retry_after_s``), waited out and
    then up to ``retry_after_jitter`` of it again at random: clients refused together (a tenant's
    burst over its rate) would otherwise all come back in the same instant, refused again
    together, and slow every other tenant's requests in that instant."""

    max_retries: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 60.0
    retry_after_jitter: float = 0.5

    def delay(self, failures: int, headers: Mapping[str, str] | None = None) -> float:
        hinted = retry_after(headers) if headers is not None else None
        if hinted is not None:
            return min(hinted, self.max_retry_after_s) * random.uniform(1.0, 1.0 + self.retry_after_jitter)
        return float(min(self.max_backoff_s, self.backoff_s * 2**failures) * random.uniform(0.5, 1.0))

    def after_status(self, call: Call[Any], failures: int, status: int, headers: Mapping[str, str]) -> float | None:
        """Seconds to wait before trying ``call`` again after answer ``status``; None: take it."""
        retryable = status in UNPROCESSED or (status >= 500 and call.idempotent)
        if not retryable or failures >= self.max_retries:
            return None
        return self.delay(failures, headers)

    def after_error(self, call: Call[Any], failures: int, exc: httpx.RequestError) -> float:
        """Seconds to wait before trying again after a transport error; raises when it must not."""
        if failures >= self.max_retries or not (call.idempotent or isinstance(exc, NOT_SENT)):
            raise RunqConnectionError(f"{call.method} {call.path}: {exc!r}") from exc
        return self.delay(failures)


def client_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": f"runq-client-python/{__version__}"}


def stream_timeout(timeout: float, silence: float, remaining: float | None) -> httpx.Timeout:
    """A stream's timeouts: ``timeout`` to connect, a read may wait ``silence`` seconds (past the
    keep-alive it should have brought) or until the caller's deadline passes."""
    read = silence if remaining is None else max(0.01, min(silence, remaining))
    return httpx.Timeout(timeout, read=read)
