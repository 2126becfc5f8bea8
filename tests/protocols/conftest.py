"""A live runq (one API process, one worker) for the protocol tests, and the official Node clients
(`ai` v6, `@ag-ui/client`, `@langchain/langgraph-sdk`) from tests/node run against it with ``node --test``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from tests.api_support import ROOT, ApiProcess
from tests.clients.conftest import new_key
from tests.fakes.openai_server import FakeOpenAI

NODE_DIR = ROOT / "tests" / "node"
# Quick polls and leases: demo runs finish in a fraction of a second.
SERVER_ENV = {
    "RUNQ_POLL_S": "0.2",
    "RUNQ_LEASE_S": "5",
    "RUNQ_HEARTBEAT_S": "1",
    "RUNQ_CORS_ORIGINS": "http://127.0.0.1:5173",
    # the graphs of the LangGraph conformance suite, for the LangGraph SDK's client
    "RUNQ_LANGGRAPH_CONFIG": str(ROOT / "tests" / "langgraph_server" / "app" / "langgraph.json"),
}

@pytest.fixture(scope="package")
def api(database_url: str) -> Iterator[ApiProcess]:
    process = ApiProcess(database_url, env=SERVER_ENV)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()

@pytest.fixture(scope="package")
def model() -> Iterator[FakeOpenAI]:
    """The fake model every `openai` run of the package talks to (tests script its turns)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="package")
def worker(api: ApiProcess, database_url: str, model: FakeOpenAI) -> Iterator[subprocess.Popen[bytes]]:
    """The package's one worker: two would claim each other's runs on the shared database."""
    openai = {"RUNQ_OPENAI_BASE_URL": model.base_url, "RUNQ_OPENAI_API_KEY": "sk-test"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.worker", "--concurrency", "16"],
        cwd=ROOT,
        env=os.environ | {"RUNQ_DATABASE_URL": database_url, **SERVER_ENV, **openai},
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

@pytest.fixture
def api_key(database_url: str) -> str:
    """A key of a new tenant per test: tests never see each other's threads."""
    return new_key(database_url)

def run_node(script: str, env: Mapping[str, str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one ``tests/node/<script>`` under ``node --test``; the test fails with node's own
    report when any of its cases fails. ``env`` carries the server's URL, a key, ids, etc."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules").is_dir():
        pytest.fail("node and tests/node/node_modules are needed (make test runs npm ci)")
    result = subprocess.run(
        [node, "--test", "--test-reporter=spec", str(NODE_DIR / script)],
        cwd=NODE_DIR,
        env=os.environ | dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"node --test {script} failed:\n{result.stdout}\n{result.stderr}"
    return result

def node_env(api: ApiProcess, key: str, **extra: object) -> dict[str, str]:
    """The environment a node test reads: RUNQ_URL, RUNQ_KEY and extra values (JSON for non-strings)."""
    values = {"RUNQ_URL": api.base_url, "RUNQ_KEY": key}
    values.update({name: value if isinstance(value, str) else json.dumps(value) for name, value in extra.items()})
    return values

