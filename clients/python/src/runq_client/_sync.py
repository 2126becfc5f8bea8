"""The blocking client: :class:`Client` moves the bytes of the shared calls over httpx.

Each method is one line over an :mod:`~runq_client.operations` call; the stream and retry
decisions live in :mod:`~runq_client.follow` and :mod:`~runq_client.calls`. This file is
generated from :mod:`runq_client._async` by ``scripts/unasync.py``: edit that one
(as httpcore does), so the two are never written twice and never diverge.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from runq_client import operations as ops
from runq_client.calls import SILENCE_TIMEOUT_S, Call, RetryPolicy, client_headers, stream_timeout
from runq_client.follow import Deadline, Follow
from runq_client.models import (
    Event,
    EventPage,
    Message,
    Page,
    Run,
    StreamToken,
    Thread,
    ThreadToken,
)
from runq_client.operations import RunId

T = TypeVar("T")


class Client:
    """``Client(base_url, api_key)``: runs and threads of the key's tenant.

    ``retry`` sets how often idempotent calls are retried; a stream that brings nothing, not even
    a keep-alive, for ``silence_timeout`` seconds is closed and resumed; ``http`` lets you bring
    your own ``httpx.Client`` (its base URL and headers are then yours to set).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0,
                 silence_timeout: float = SILENCE_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.Client | None = None) -> None:
        self.http = http or httpx.Client(base_url=base_url, headers=client_headers(api_key), timeout=timeout)
        self.timeout = timeout
        self.silence_timeout = silence_timeout
        self.retry = retry or RetryPolicy()
        self.runs = Runs(self)
        self.threads = Threads(self)

    def send(self, call: Call[T]) -> T:
        """Make ``call``, retrying what :class:`RetryPolicy` allows; its result or :class:`RunqError`."""
        failures = 0
        while True:
            try:
                response = self.http.request(call.method, call.path, **call.request_kwargs())
            except httpx.RequestError as exc:
                delay = self.retry.after_error(call, failures, exc)
            else:
                retry_in = self.retry.after_status(call, failures, response.status_code, response.headers)
                if retry_in is None:
                    return call.result(response.status_code, response.content)
                delay = retry_in
            failures += 1
            time.sleep(delay)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Runs:
    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, agent: str, input: Mapping[str, Any] | None = None, *,
               idempotency_key: str | None = None, **fields: Any) -> Run:
        """A new run (``201``); retried safely under one generated ``Idempotency-Key``."""
        return self._client.send(ops.create_run(agent, input, fields, idempotency_key))

    def get(self, run_id: RunId) -> Run:
        return self._client.send(ops.get_run(run_id))

    def list(self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[Run]:
        return self._client.send(ops.list_runs(status, limit, cursor))

    def cancel(self, run_id: RunId, *, note: str | None = None) -> Run:
        return self._client.send(ops.cancel_run(run_id, note))

    def resume(self, run_id: RunId, value: Any, waitpoint_id: str | None = None) -> Run:
        return self._client.send(ops.resume_run(run_id, value, waitpoint_id))

    def events(self, run_id: RunId, *, after: int = 0, limit: int | None = None) -> EventPage:
        """One JSON page of stored events after ``after``."""
        return self._client.send(ops.list_events(run_id, after, limit))

    def stream_token(self, run_id: RunId, *, scopes: Sequence[str] | None = None) -> StreamToken:
        return self._client.send(ops.stream_token(run_id, list(scopes) if scopes is not None else None))

    def stream(self, run_id: RunId, after: int = 0) -> Iterator[Event]:
        """The run's events after seq ``after`` as they come, each once and in order, across
        dropped connections, ending after the terminal event."""
        return self._follow(run_id, after, Deadline(None))

    def wait(self, run_id: RunId, timeout: float | None = None) -> Run:
        """The run once terminal; :class:`RunqTimeout` after ``timeout`` seconds."""
        deadline = Deadline(timeout)
        run = self.get(run_id)
        while not run.is_terminal:
            for _ in self._follow(run_id, run.last_event_seq, deadline):
                pass
            run = self.get(run_id)
        return run

    def _follow(self, run_id: RunId, after: int, deadline: Deadline) -> Iterator[Event]:
        client = self._client
        follow = Follow(run_id, after, client.retry)
        while not follow.done:
            deadline.check()
            call = follow.request()
            try:
                timeout = stream_timeout(client.timeout, client.silence_timeout, deadline.remaining())
                with client.http.stream(call.method, call.path, timeout=timeout,
                                              **call.request_kwargs()) as response:
                    if response.status_code != 200:
                        delay = follow.rejected(response.status_code, response.headers, response.read())
                    else:
                        for chunk in response.iter_bytes():
                            yield from follow.feed(chunk)
                            if follow.done:
                                return
                        follow.settle(self.get(run_id))
                        if follow.done:
                            return
                        delay = follow.dropped(None)
            except httpx.RequestError as exc:
                deadline.check()
                delay = follow.dropped(exc)
            time.sleep(deadline.cap(delay))


class ThreadRuns:
    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, thread_id: RunId, agent: str, input: Mapping[str, Any] | None = None, *,
               multitask_strategy: str | None = None, idempotency_key: str | None = None, **fields: Any) -> Run:
        """A run in the thread; ``multitask_strategy`` says what happens if one is in flight."""
        body = ops.thread_run_fields(multitask_strategy, fields)
        return self._client.send(ops.create_run(agent, input, body, idempotency_key, thread_id=thread_id))

    def list(self, thread_id: RunId, *, status: str | None = None, limit: int | None = None,
             cursor: str | None = None) -> Page[Run]:
        return self._client.send(ops.list_runs(status, limit, cursor, thread_id=thread_id))


class Threads:
    def __init__(self, client: Client) -> None:
        self._client = client
        self.runs = ThreadRuns(client)

    def create(self, *, metadata: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
               chat_id: str | None = None) -> Thread:
        """A new thread; ``chat_id`` names it as a chat frontend does (unique per tenant)."""
        return self._client.send(ops.create_thread(metadata, idempotency_key, chat_id))

    def token(self, thread_id: RunId, *, scopes: Sequence[str] | None = None, ttl_s: float | None = None,
              agent: str | None = None, input: Mapping[str, Any] | None = None) -> ThreadToken:
        """A token for a browser: this thread and its runs only (all four scopes by default)."""
        return self._client.send(
            ops.thread_token(thread_id, list(scopes) if scopes is not None else None, ttl_s, agent, input)
        )

    def get(self, thread_id: RunId) -> Thread:
        return self._client.send(ops.get_thread(thread_id))

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[Thread]:
        return self._client.send(ops.list_threads(limit, cursor))

    def messages(self, thread_id: RunId, *, limit: int | None = None, cursor: str | None = None) -> Page[Message]:
        return self._client.send(ops.thread_messages(thread_id, limit, cursor))

    def delete(self, thread_id: RunId) -> None:
        self._client.send(ops.delete_thread(thread_id))
