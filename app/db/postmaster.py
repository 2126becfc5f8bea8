"""The postgres processes serving a data directory, found through /proc, and their lock file.

``postmaster.pid`` alone is not to be trusted: in containers its pid is often reused by an
unrelated process. A pid is believed only when /proc shows a ``postgres`` working in that very
data directory (the postmaster and all its children chdir there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


class LeftoverServerError(RuntimeError):
    """Postgres processes on a data directory survived SIGKILL."""


def server_pids(data_dir: Path) -> set[int]:
    """Live postgres processes serving data_dir."""
    try:
        target = data_dir.stat()
    except FileNotFoundError:
        return set()
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:  # zombies, vanished processes and other users' processes raise here
            exe = os.readlink(f"/proc/{entry.name}/exe").removesuffix(" (deleted)")
            cwd = os.stat(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if Path(exe).name == "postgres" and os.path.samestat(cwd, target):
            pids.add(int(entry.name))
    return pids


def _lock_file(data_dir: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return (data_dir / "postmaster.pid").read_text().split("\n")
    return []


def _postmaster_pid(data_dir: Path) -> int | None:
    with contextlib.suppress(IndexError, ValueError):
        return int(_lock_file(data_dir)[0])
    return None


def live_postmaster(data_dir: Path) -> tuple[int, int] | None:
    """``(pid, port)`` of the postmaster serving data_dir now, or None.

    The port is the fourth line of ``postmaster.pid``; the postmaster writes it before it
    accepts connections, and only a postmaster that /proc confirms is taken.
    """
    lines = _lock_file(data_dir)
    try:
        pid, port = int(lines[0]), int(lines[3])
    except (IndexError, ValueError):
        return None
    return (pid, port) if pid in server_pids(data_dir) else None


def stop_leftover_server(data_dir: Path) -> None:
    """Shut down a server that a crashed owner left on data_dir and drop its stale lock file."""
    postmaster = _postmaster_pid(data_dir)
    for sig, timeout in ((signal.SIGINT, 10.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        pids = server_pids(data_dir)
        if not pids:
            break
        # Only the postmaster shuts down cleanly; its children get signals only as a last resort.
        targets = {postmaster} if sig != signal.SIGKILL and postmaster in pids else pids
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        wait_until(lambda: not server_pids(data_dir), timeout)
    if pids := server_pids(data_dir):
        raise LeftoverServerError(f"postgres processes {sorted(pids)} on {data_dir} survived")
    (data_dir / "postmaster.pid").unlink(missing_ok=True)


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
