"""Helpers for the API tests: keys, SSE parsing, driving a run as a worker would, API servers."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.keys import insert_key
from app.domain import Claim, Finish
from app.queue import Queue

ROOT = Path(__file__).resolve().parents[1]
SECRET = "test-secret-key-0123456789abcdef-0123456789"
RUN_FIELDS = {
    "id", "tenant_id", "agent", "status", "priority", "attempts", "max_attempts", "input",
    "budget", "output", "available_at", "created_at", "updated_at", "finished_at",
    "cancel_requested_at", "cancel_reason", "error_code", "error_message", "on_disconnect",
    "disconnect_grace_s", "last_event_seq", "schedule_id", "thread_id", "usage", "waitpoint",
}  # fmt: skip


async def new_key(engine: AsyncEngine, tenant: str, *, admin: bool = False) -> dict[str, str]:
    """Authorization headers for a fresh key of ``tenant``."""
    return {"Authorization": f"Bearer {await insert_key(engine, tenant_id=tenant, admin=admin)}"}


async def create_run(client: httpx.AsyncClient, headers: Mapping[str, str], **body: Any) -> dict[str, Any]:
    """``POST /runs`` for the demo agent with ``body`` overrides; the run JSON."""
    response = await client.post("/runs", json={"agent": "demo", "input": {}} | body, headers=dict(headers))
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


async def wait_for(check: Callable[[], Awaitable[Any]], *, within: float = 10.0, every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(every)


@dataclass(frozen=True)
class Frame:
    """One SSE message, or a comment (keep-alive)."""

    id: int | None = None
    event: str | None = None
    data: Any = None
    comment: str | None = None


async def sse_frames(response: httpx.Response) -> AsyncIterator[Frame]:
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if fields:
                yield Frame(
                    id=int(fields["id"]) if "id" in fields else None,
                    event=fields.get("event"),
                    data=json.loads(fields["data"]) if "data" in fields else None,
                )
                fields = {}
        elif line.startswith(":"):
            yield Frame(comment=line[1:].strip())
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def parse_sse(text: str) -> list[Frame]:
    """Frames of a complete (buffered) SSE body, comments left out."""
    frames = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            (line.partition(":")[0], line.partition(":")[2].removeprefix(" "))
            for line in block.split("\n")
            if line and not line.startswith(":")
        )
        if fields:
            frames.append(Frame(id=int(fields["id"]), event=fields["event"], data=json.loads(fields["data"])))
    return frames


class RunDriver:
    """Plays the worker's part for one run through the repository layer, deterministically."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.claim: Claim | None = None

    async def start(self) -> Claim:
        claims = await self.queue.claim_batch(worker_id=f"test:{os.getpid()}:{uuid.uuid4().hex[:6]}", limit=1)
        assert len(claims) == 1, "expected exactly one pending run to claim"
        self.claim = claims[0]
        return self.claim

    def _ref(self) -> dict[str, uuid.UUID]:
        assert self.claim is not None
        return {"run_id": self.claim.run.id, "lease_id": self.claim.lease_id}

    async def deltas(self, *texts: str) -> int:
        return await self.queue.append_events(
            **self._ref(), events=[("message.delta", {"text": t}) for t in texts]
        )

    async def fail(self) -> int:
        """A fatal failure: ``dead`` with ``run.failed``."""
        run = await self.queue.finish(**self._ref(), finish=Finish.dead("fatal_error", "test"))
        return run.last_event_seq

    async def complete(self, output: Any = None) -> int:
        return (await self.queue.finish(**self._ref(), finish=Finish.done(output or {"text": "done"}))).last_event_seq


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiProcess:
    """``python -m uvicorn app.main:app`` on a free port, as in production."""

    def __init__(self, database_url: str, env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(self.port), "--log-level", "warning"],
            cwd=ROOT,
            env=os.environ | {"RUNQ_DATABASE_URL": database_url, "RUNQ_SECRET_KEY": SECRET, **(env or {})},
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the API process exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"API at {self.base_url} not ready within {timeout}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc, timeout=15)


class InProcessServer:
    """A real uvicorn server for an app built in the test (custom settings), on this loop."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> InProcessServer:
        self.task = asyncio.create_task(self.server.serve())
        await wait_for(self._started, within=15)
        return self

    async def _started(self) -> bool:
        assert self.task is not None
        if self.task.done():
            self.task.result()
        return self.server.started

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout=15)
