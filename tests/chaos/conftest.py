"""Real worker processes (``python -m app.worker``) for the chaos tests, always killed at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.worker_support import descendants, running

ROOT = Path(__file__).resolve().parents[2]

# Short timings so that lease expiry, reaping and retries happen within a test.
CHAOS_ENV = {
    "RUNQ_LEASE_S": "2",
    "RUNQ_HEARTBEAT_S": "0.5",
    "RUNQ_REAPER_S": "0.5",
    "RUNQ_POLL_S": "0.2",
    "RUNQ_RETRY_BASE_S": "0.1",
    "RUNQ_RETRY_MAX_S": "1",
    "RUNQ_SHUTDOWN_GRACE_S": "1",
    "RUNQ_LOG_FORMAT": "json",
    "RUNQ_AGENTS": "blocker=tests.chaos.agents:BlockingAgent,baddata=tests.chaos.agents:BadDataAgent",
}


class WorkerProcess:
    """One ``python -m app.worker``; its stderr (JSON log lines) goes to a file for debugging."""

    def __init__(self, index: int, *, env: dict[str, str], concurrency: int, logs: Path) -> None:
        self.stderr_path = logs / f"worker-{index}.stderr"
        self.stdout_path = logs / f"worker-{index}.stdout"
        with self.stderr_path.open("wb") as err, self.stdout_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.worker", "--concurrency", str(concurrency)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tools(self, argv: list[str]) -> list[int]:
        """The worker's descendants running exactly ``argv`` (its tool processes)."""
        return [pid for pid in descendants(self.pid) if running(pid, argv)]

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 20.0) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while "worker started" not in self.log():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready after {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def sigkill(self) -> None:
        """Like a crash: the worker dies at once; the tools it started are not its to clean up."""
        self.proc.kill()
        self.proc.wait()

    def kill_all(self) -> None:
        """Teardown: the worker and every process it left behind."""
        for pid in [self.pid, *descendants(self.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()


SpawnWorker = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker(database_url: str, tmp_path: Path) -> Iterator[SpawnWorker]:
    """``spawn_worker(concurrency=4, RUNQ_LEASE_S="1")`` starts a worker process and, unless
    ``ready=False``, waits until it serves."""
    workers: list[WorkerProcess] = []

    def spawn(concurrency: int = 4, *, ready: bool = True, **env: str) -> WorkerProcess:
        full_env = os.environ | CHAOS_ENV | env | {"RUNQ_DATABASE_URL": database_url}
        worker = WorkerProcess(len(workers), env=full_env, concurrency=concurrency, logs=tmp_path)
        workers.append(worker)
        return worker.wait_ready() if ready else worker

    try:
        yield spawn
    finally:
        for worker in workers:
            worker.kill_all()
