"""A real runq for the client tests: one API process and one worker on the test database."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.api.keys import create_key
from tests.api_support import ROOT, ApiProcess

# Quick polls and leases: demo runs finish in a fraction of a second.
SERVER_ENV = {"RUNQ_POLL_S": "0.2", "RUNQ_LEASE_S": "5", "RUNQ_HEARTBEAT_S": "1"}


@pytest.fixture(scope="package")
def api(database_url: str) -> Iterator[ApiProcess]:
    process = ApiProcess(database_url, env=SERVER_ENV)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="package")
def worker(api: ApiProcess, database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.worker", "--concurrency", "32"],
        cwd=ROOT,
        env=os.environ | {"RUNQ_DATABASE_URL": database_url, **SERVER_ENV},
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def new_key(database_url: str, tenant: str | None = None) -> str:
    """A key of a new tenant (on a thread of its own: async tests call this inside their loop)."""
    coroutine = create_key(database_url, tenant_id=tenant or f"client-{uuid.uuid4().hex[:6]}")
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="package")
def api_key(database_url: str) -> str:
    return new_key(database_url)
