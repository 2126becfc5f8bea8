"""Two real API processes (``python -m uvicorn app.main:app``) on the test database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.api_support import ROOT, ApiProcess


@pytest.fixture(scope="session")
def apis(database_url: str) -> Iterator[tuple[ApiProcess, ApiProcess]]:
    pair = (ApiProcess(database_url), ApiProcess(database_url))
    try:
        for api in pair:
            api.wait_ready()
        yield pair
    finally:
        for api in pair:
            api.stop()


@pytest.fixture
def worker(database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker process with short leases, stopped (gracefully) after the test."""
    env = os.environ | {
        "RUNQ_DATABASE_URL": database_url,
        "RUNQ_LEASE_S": "2",
        "RUNQ_HEARTBEAT_S": "0.5",
        "RUNQ_POLL_S": "0.2",
    }
    proc = subprocess.Popen([sys.executable, "-m", "app.worker", "--concurrency", "4"], cwd=ROOT, env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
