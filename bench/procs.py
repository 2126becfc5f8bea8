"""Child processes (workers, the API, peer workers): started together, always stopped, observed.

Stopping is SIGTERM, then SIGKILL after a grace period, in a ``finally``; stderr goes to a
temp file whose tail is shown when a child dies early, so a broken worker fails the bench
loudly instead of making it wait for a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.db.url import asyncpg_dsn

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of any process so far (all its threads); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def tree_cpu_s(pid: int) -> float:
    """:func:`process_cpu_s` of a process and of every live descendant of it (a server that
    runs its work in child processes); 0 for any that is gone."""
    total = process_cpu_s(pid) or 0.0
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = task.read_text().split()
        except OSError:
            continue
        total += sum(tree_cpu_s(int(kid)) for kid in kids)
    return total


class ChildFailed(RuntimeError):
    """A child process exited while the bench still needed it."""


@dataclass
class Child:
    proc: asyncio.subprocess.Process
    argv: Sequence[str]
    log: Path

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process so far (all its threads)."""
        return process_cpu_s(self.proc.pid) or 0.0

    def check(self) -> None:
        if self.proc.returncode is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-25:]
            raise ChildFailed(
                f"{' '.join(self.argv)} exited with {self.proc.returncode}:\n" + "\n".join(tail)
            )


@asynccontextmanager
async def children(
    argvs: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str],
    stdout_pipe: bool = False,
    grace_s: float = 10.0,
    cwd: Path = ROOT,
) -> AsyncIterator[list[Child]]:
    """Start every argv (in ``cwd``, the project root unless told, ``env`` over ours); stop
    them all at the end."""
    logs = Path(tempfile.mkdtemp(prefix="runq-bench-logs-"))
    started: list[Child] = []
    try:
        for i, argv in enumerate(argvs):
            log = logs / f"child-{i}.log"
            err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=cwd,
                    env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE if stdout_pipe else asyncio.subprocess.DEVNULL,
                    stderr=err,
                )
            finally:
                os.close(err)
            started.append(Child(proc, argv, log))
        yield started
    finally:
        for child in started:
            if child.proc.returncode is None:
                child.proc.terminate()
        for child in started:
            try:
                await asyncio.wait_for(child.proc.wait(), grace_s)
            except TimeoutError:
                child.proc.kill()
                await child.proc.wait()


async def arriving(count: int, *, over_s: float) -> AsyncIterator[int]:
    """0 to ``count - 1``, the i-th at i / count of ``over_s`` after the first, as independent
    users arrive: in the same instant, the runs they start would stay in lock-step and every
    step would be a burst of commits on two cores."""
    started = time.monotonic()
    for i in range(count):
        await asyncio.sleep(max(started + over_s * i / count - time.monotonic(), 0.0))
        yield i


async def wait_for(
    condition: Callable[[], Awaitable[bool]],
    *,
    timeout_s: float,
    what: str,
    every_s: float = 0.05,
    watch: Sequence[Child] = (),
) -> float:
    """Poll ``condition`` until true; the ``time.time()`` it first held. Raises on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await condition():
            return time.time()
        for child in watch:
            child.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(every_s)


APP_NAME = "runq-bench"  # the bench's own sessions, told apart from the workers'
# Worker sessions sitting in LISTEN (runq, Procrastinate: a dedicated session each) ...
LISTENING = "query ILIKE 'LISTEN%'"
# ... or any idle worker session (PgQueuer LISTENs and dequeues on one connection).
IDLE_SESSIONS = "state = 'idle'"


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(asyncpg_dsn(url), server_settings={"application_name": APP_NAME})
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            await conn.close()


async def wait_for_workers(
    url: str, count: int, *, watch: Sequence[Child], sessions: str = LISTENING, timeout_s: float = 60
) -> None:
    """Until ``count`` worker sessions on the database match ``sessions``: the workers are up
    and idle before any work exists, so start-up costs stay out of every figure."""
    async with connect(url) as conn:
        database = await conn.fetchval("SELECT current_database()")

        async def ready() -> bool:
            found = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                f" AND application_name <> $2 AND {sessions}",
                database,
                APP_NAME,
            )
            return bool(found >= count)

        await wait_for(ready, timeout_s=timeout_s, what=f"{count} idle workers", every_s=0.1, watch=watch)
    await asyncio.sleep(0.5)  # a worker may still poll once right after it is up; let it settle


def machine_busy_s() -> float:
    """CPU seconds spent non-idle on the whole machine since boot (every process, every core)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICKS
