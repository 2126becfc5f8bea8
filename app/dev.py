"""``runq dev`` / ``make run``: embedded PostgreSQL, migrations, the API and one worker.

The API and the worker run as child processes, as in production, sharing the database URL and
one secret key (so stream tokens issued by the API verify in any API process). Ctrl-C or
SIGTERM stops the children first, then the embedded server, so a second ``runq dev`` starts
cleanly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from types import FrameType

import httpx

from app.api.keys import create_key
from app.db.migrate import upgrade
from app.db.runtime import database
from app.settings import Settings

DEV_TENANT = "dev"
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def run_dev(settings: Settings, *, host: str, port: int, concurrency: int) -> int:
    """Run everything in the foreground until interrupted; the exit status of the session."""
    stop = _StopSignal()
    with database(settings) as url:
        upgrade(url)
        key = asyncio.run(create_key(url, tenant_id=DEV_TENANT, admin=True))
        env = os.environ | {"RUNQ_DATABASE_URL": url, "RUNQ_SECRET_KEY": settings.secret_key or ""}
        children = {
            "api": subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "app.main:app", "--host", host, "--port", str(port)],
                env=env,
            ),
            "worker": subprocess.Popen(
                [sys.executable, "-m", "app.worker", "--concurrency", str(concurrency)], env=env
            ),
        }
        try:
            base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
            if not _wait_healthy(base, children, stop):
                return 0 if stop.requested else 1
            print(_banner(base, key), flush=True)
            while not stop.requested:
                for name, child in children.items():
                    if child.poll() is not None:
                        print(f"runq dev: the {name} exited with {child.returncode}", file=sys.stderr)
                        return 1
                time.sleep(0.2)
            return 0
        finally:
            _stop_all(children.values())


class _StopSignal:
    """Turns SIGINT/SIGTERM into a flag the supervising loop checks."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.requested = True


def _wait_healthy(base: str, children: dict[str, subprocess.Popen[bytes]], stop: _StopSignal) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and not stop.requested:
        if any(child.poll() is not None for child in children.values()):
            print("runq dev: a child process exited during startup", file=sys.stderr)
            return False
        try:
            if httpx.get(f"{base}/readyz", timeout=1.0).status_code == 200:
                return True
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    if not stop.requested:
        print(f"runq dev: the API did not become ready at {base}", file=sys.stderr)
    return False


def _stop_all(children: Iterable[subprocess.Popen[bytes]]) -> None:
    procs = list(children)
    for child in procs:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in procs:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _banner(base: str, key: str) -> str:
    return f"""
runq dev is up: API {base} (docs at {base}/docs), one worker.

  export RUNQ_KEY={key}

  # create a demo run
  curl -s {base}/runs -H "Authorization: Bearer $RUNQ_KEY" -H 'Content-Type: application/json' \\
       -d '{{"agent": "demo", "input": {{"prompt": "hello", "steps": 5, "step_s": 1}}}}'

  # follow it (resume after a drop with -H 'Last-Event-ID: <last id seen>')
  curl -N {base}/runs/<id>/events -H "Authorization: Bearer $RUNQ_KEY"

  # stop it
  curl -s -X POST {base}/runs/<id>/cancel -H "Authorization: Bearer $RUNQ_KEY"

Ctrl-C stops everything.
"""
