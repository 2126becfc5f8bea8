"""Helpers for the worker tests: run factories, waiting on conditions, the event-log invariants."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from app.domain import Event, Run
from app.queue import NewRun, Queue
from app.settings import Settings
from app.worker.main import serve
from tests.invariants import event_log_violations

T = TypeVar("T")

FAST = {
    "lease_s": 2.0,
    "heartbeat_s": 0.3,
    "poll_s": 0.2,
    "reaper_s": 0.5,
    "retry_base_s": 0.05,
    "retry_max_s": 0.2,
    "shutdown_grace_s": 0.0,
}


async def wait_until(
    probe: Callable[[], Awaitable[T] | T], *, within: float, what: str = "condition"
) -> T:
    """Poll ``probe`` (sync or async) until it returns something truthy; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


async def enqueue_demo(queue: Queue, tenant_id: str = "t1", **fields: Any) -> Run:
    """A demo run; ``budget``/``max_attempts`` go to the run, everything else is input."""
    options = {k: fields.pop(k) for k in ("budget", "max_attempts", "agent") if k in fields}
    run, _ = await queue.enqueue(NewRun(
        tenant_id=tenant_id,
        agent=options.get("agent", "demo"),
        input=fields,
        budget=options.get("budget"),
        max_attempts=options.get("max_attempts", 3)),
    )
    return run


async def wait_finished(queue: Queue, run_id: uuid.UUID, *, within: float = 15.0) -> Run:
    async def probe() -> Run | None:
        run = await queue.get_run(run_id, tenant_id=None)
        return run if run.is_terminal else None

    return await wait_until(probe, within=within, what=f"run {run_id} to finish")


def check_event_log(events: list[Event]) -> None:
    """The contract's invariants for one finished run's log (docs/contract.md, sections 1 and 3)."""
    problems = event_log_violations(events, finished=True)
    assert not problems, f"{problems}: {[(e.seq, e.type, e.attempt) for e in events]}"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``), deepest last."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return found
    for task in tasks:
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def running(pid: int, argv: list[str] | None = None) -> bool:
    """Alive and not a zombie (a killed orphan may wait for its reaper), running ``argv`` if given."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z" and (argv is None or cmdline == ("\0".join(argv) + "\0").encode())


@asynccontextmanager
async def in_process_worker(
    database_url: str, *, concurrency: int = 4, **overrides: Any
) -> AsyncIterator[Settings]:
    """The worker's ``serve`` on the test's event loop, stopped (gracefully) on exit."""
    settings = Settings(database_url=database_url, **(FAST | overrides))
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(settings, database_url=database_url, concurrency=concurrency, stop=stop)
    )
    try:
        yield settings
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
