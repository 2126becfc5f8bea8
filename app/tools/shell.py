"""The shell tool: one command in its own process group, with a deadline and capped output.

Each command gets a new session (``start_new_session``), so killing its process group also
kills whatever it started (pipelines, background children). The groups of a run are kept in a
:class:`ProcessGroups` registry that the heartbeat thread can kill without the event loop,
which may be blocked by the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from dataclasses import dataclass

from app.guards.redact import Redactor, default_redactor

DEFAULT_TIMEOUT_S = 600.0
MAX_OUTPUT_BYTES = 64 * 1024
_TRUNCATED = "\n[output truncated]"


@dataclass(slots=True)  # not frozen: it must satisfy the agents' ShellResult protocol
class ShellResult:
    """``exit_code`` is None when the command hit its deadline, negative when a signal ended it."""

    exit_code: int | None
    output: str
    timed_out: bool


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ProcessGroups:
    """The process groups of one run's tool calls; safe to use from any thread.

    Once :meth:`kill_all` has run, the registry is closed: a command started afterwards (the
    agent had not yet noticed it must stop) is killed as soon as it registers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pgids: set[int] = set()
        self._closed = False

    def add(self, pgid: int) -> None:
        with self._lock:
            if not self._closed:
                self._pgids.add(pgid)
                return
        kill_group(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._pgids.discard(pgid)

    def kill_all(self) -> None:
        with self._lock:
            self._closed = True
            pgids, self._pgids = self._pgids, set()
        for pgid in pgids:
            kill_group(pgid)


async def run_shell(
    command: str,
    *,
    groups: ProcessGroups,
    timeout_s: float | None = None,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    redactor: Redactor | None = None,
) -> ShellResult:
    """Run ``/bin/sh -c command``; stdout and stderr merged, capped and redacted.

    Cancelling the awaiting task kills the whole process group before the cancellation
    propagates, so no tool outlives the run that started it.
    """
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    groups.add(proc.pid)  # the session leader's pid is the group id
    assert proc.stdout is not None
    reader = asyncio.create_task(_read_capped(proc.stdout, max_output_bytes))
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s or DEFAULT_TIMEOUT_S):
            await _exited(proc.pid)
    except TimeoutError:
        timed_out = True
    except BaseException:
        reader.cancel()
        raise
    finally:
        # Also kills background children of a command that has exited: they would hold the
        # output pipe open and outlive the run.
        kill_group(proc.pid)
        groups.discard(proc.pid)
    await proc.wait()
    data, truncated = await reader
    # PostgreSQL's jsonb cannot hold NUL, which binary output is full of.
    output = data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    output += _TRUNCATED if truncated else ""
    return ShellResult(
        exit_code=None if timed_out else proc.returncode,
        output=(redactor or default_redactor()).text(output),
        timed_out=timed_out,
    )


async def _exited(pid: int) -> None:
    """Until the process has exited. ``Process.wait()`` also waits for its pipes to close, which
    a background child holding stdout would delay for as long as it lives."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # already exited and reaped
        return
    loop = asyncio.get_running_loop()
    exited = asyncio.Event()
    loop.add_reader(pidfd, exited.set)
    try:
        await exited.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """Read to EOF, keeping the first ``limit`` bytes; the rest is drained so the child never blocks."""
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(65536):
        room = limit - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), truncated
