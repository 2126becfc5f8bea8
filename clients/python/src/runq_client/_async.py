"""The asyncio client: :class:`AsyncClient` moves the bytes of the shared calls over httpx.

Each method is one line over an :mod:`~runq_client.operations` call; the stream and retry
decisions live in :mod:`~runq_client.follow` and :mod:`~runq_client.calls`. The blocking
client, :mod:`runq_client._sync`, is generated from this file by ``scripts/unasync.py``
(as httpcore does), so the two are never written twice and never diverge.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
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


class AsyncClient:
    """``AsyncClient(base_url, api_key)``: runs and threads of the key's tenant.

    ``retry`` sets how often idempotent calls are retried; a stream that brings nothing, not even
    a keep-alive, for ``silence_timeout`` seconds is closed and resumed; ``http`` lets you bring
    your own ``httpx.AsyncClient`` (its base URL and headers are then yours to set).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0,
                 silence_timeout: float = SILENCE_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.AsyncClient | None = None) -> None:
        self.http = http or httpx.AsyncClient(base_url=base_url, headers=client_headers(api_key), timeout=timeout)
        self.timeout = timeout
        self.silence_timeout = silence_timeout
        self.retry = retry or RetryPolicy()
        self.runs = Runs(self)
        self.threads = Threads(self)

    async def send(self, call: Call[T]) -> T:
        """Make ``call``, retrying what :class:`RetryPolicy` allows; its result or :class:`RunqError`."""
        failures = 0
        while True:
            try:
                response = await self.http.request(call.method, call.path, **call.request_kwargs())
            except httpx.RequestError as exc:
                delay = self.retry.after_error(call, failures, exc)
            else:
                retry_in = self.retry.after_status(call, failures, response.status_code, response.headers)
                if retry_in is None:
                    return call.result(response.status_code, response.content)
                delay = retry_in
            failures += 1
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        await self.aclose()


class Runs:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(self, agent: str, input: Mapping[str, Any] | None = None, *,
               idempotency_key: str | None = None, **fields: Any) -> Run:
        """A new run (``201``); retried safely under one generated ``Idempotency-Key``."""
        return await self._client.send(ops.create_run(agent, input, fields, idempotency_key))

    async def get(self, run_id: RunId) -> Run:
        return await self._client.send(ops.get_run(run_id))

    async def list(self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[Run]:
        return await self._client.send(ops.list_runs(status, limit, cursor))

    async def cancel(self, run_id: RunId, *, note: str | None = None) -> Run:
        return await self._client.send(ops.cancel_run(run_id, note))

    async def resume(self, run_id: RunId, value: Any, waitpoint_id: str | None = None) -> Run:
        return await self._client.send(ops.resume_run(run_id, value, waitpoint_id))

    async def events(self, run_id: RunId, *, after: int = 0, limit: int | None = None) -> EventPage:
        """One JSON page of stored events after ``after``."""
        return await self._client.send(ops.list_events(run_id, after, limit))

    async def stream_token(self, run_id: RunId, *, scopes: Sequence[str] | None = None) -> StreamToken:
        return await self._client.send(ops.stream_token(run_id, list(scopes) if scopes is not None else None))

    def stream(self, run_id: RunId, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after seq ``after`` as they come, each once and in order, across
        dropped connections, ending after the terminal event."""
        return self._follow(run_id, after, Deadline(None))

    async def wait(self, run_id: RunId, timeout: float | None = None) -> Run:  # noqa: ASYNC109 (§13's signature)
        """The run once terminal; :class:`RunqTimeout` after ``timeout`` seconds."""
        deadline = Deadline(timeout)
        run = await self.get(run_id)
        while not run.is_terminal:
            async for _ in self._follow(run_id, run.last_event_seq, deadline):
                pass
            run = await self.get(run_id)
        return run

    async def _follow(self, run_id: RunId, after: int, deadline: Deadline) -> AsyncIterator[Event]:
        client = self._client
        follow = Follow(run_id, after, client.retry)
        while not follow.done:
            deadline.check()
            call = follow.request()
            try:
                timeout = stream_timeout(client.timeout, client.silence_timeout, deadline.remaining())
                async with client.http.stream(call.method, call.path, timeout=timeout,
                                              **call.request_kwargs()) as response:
                    if response.status_code != 200:
                        delay = follow.rejected(response.status_code, response.headers, await response.aread())
                    else:
                        async for chunk in response.aiter_bytes():
                            for event in follow.feed(chunk):
                                yield event
                            if follow.done:
                                return
                        follow.settle(await self.get(run_id))
                        if follow.done:
                            return
                        delay = follow.dropped(None)
            except httpx.RequestError as exc:
                deadline.check()
                delay = follow.dropped(exc)
            await asyncio.sleep(deadline.cap(delay))


class ThreadRuns:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(self, thread_id: RunId, agent: str, input: Mapping[str, Any] | None = None, *,
               multitask_strategy: str | None = None, idempotency_key: str | None = None, **fields: Any) -> Run:
        """A run in the thread; ``multitask_strategy`` says what happens if one is in flight."""
        body = ops.thread_run_fields(multitask_strategy, fields)
        return await self._client.send(ops.create_run(agent, input, body, idempotency_key, thread_id=thread_id))

    async def list(self, thread_id: RunId, *, status: str | None = None, limit: int | None = None,
             cursor: str | None = None) -> Page[Run]:
        return await self._client.send(ops.list_runs(status, limit, cursor, thread_id=thread_id))


class Threads:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self.runs = ThreadRuns(client)

    async def create(self, *, metadata: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
               chat_id: str | None = None) -> Thread:
        """A new thread; ``chat_id`` names it as a chat frontend does (unique per tenant)."""
        return await self._client.send(ops.create_thread(metadata, idempotency_key, chat_id))

    async def token(self, thread_id: RunId, *, scopes: Sequence[str] | None = None, ttl_s: float | None = None,
              agent: str | None = None, input: Mapping[str, Any] | None = None) -> ThreadToken:
        """A token for a browser: this thread and its runs only (all four scopes by default)."""
        return await self._client.send(
            ops.thread_token(thread_id, list(scopes) if scopes is not None else None, ttl_s, agent, input)
        )

    async def get(self, thread_id: RunId) -> Thread:
        return await self._client.send(ops.get_thread(thread_id))

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[Thread]:
        return await self._client.send(ops.list_threads(limit, cursor))

    async def messages(self, thread_id: RunId, *, limit: int | None = None, cursor: str | None = None) -> Page[Message]:
        return await self._client.send(ops.thread_messages(thread_id, limit, cursor))

    async def delete(self, thread_id: RunId) -> None:
        await self._client.send(ops.delete_thread(thread_id))
