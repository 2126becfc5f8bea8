"""The two servers the LangGraph server conformance suite runs against, both serving the graphs
of ``app/langgraph.json``: runq (an API process and a worker, ``/langgraph``), and, with
``--langgraph-server=reference`` (``make conformance-langgraph``), LangGraph's own
``langgraph dev`` from the venv ``make conformance-langgraph`` installs it in (started as
``reference.py`` says, which the bench shares).

Both reach the model only at the suite's fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.api_support import ROOT, ApiProcess, free_port, stop_process
from tests.clients.conftest import new_key
from tests.fakes.openai_server import FakeOpenAI
from tests.langgraph_server.reference import (
    CONFIG,
    REFERENCE_BIN,
    REFERENCE_CWD,
    reference_argv,
    reference_ok_url,
)

SERVER_ENV = {"RUNQ_POLL_S": "0.2", "RUNQ_LEASE_S": "5", "RUNQ_HEARTBEAT_S": "1"}
START_S = 90.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--langgraph-server",
        choices=("runq", "reference"),
        default="runq",
        help="the server the LangGraph conformance suite runs against",
    )


class Worker:
    """runq's worker process, which a test may SIGKILL and start again."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "app.worker", "--concurrency", "8"], cwd=ROOT, env=self.env
        )

    def kill_and_restart(self) -> None:
        self.proc.kill()  # SIGKILL: no release of its leases, no last write
        self.proc.wait()
        self.proc = self._start()

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass(frozen=True)
class Server:
    """A server under test: its name, the SDK's base URL, the key it takes (None: none) and,
    for runq, its worker."""

    name: str
    url: str
    key: str | None
    model: FakeOpenAI
    worker: Worker | None = None

    @property
    def is_runq(self) -> bool:
        return self.name == "runq"

    def client(self, key: str | None = None) -> LangGraphClient:
        return get_client(url=self.url, api_key=key or self.key)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"x-api-key": self.key} if self.key else {}, timeout=30
        )


@pytest.fixture(scope="package")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _wait_ok(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready within {START_S}s")


@pytest.fixture(scope="package")
def server_env(model: FakeOpenAI) -> dict[str, str]:
    return {
        "LANGGRAPH_TEST_MODEL_URL": model.base_url,
        "RUNQ_LANGGRAPH_CONFIG": str(CONFIG),
        **SERVER_ENV,
    }


@pytest.fixture(scope="package")
def runq_server(
    database_url: str, server_env: dict[str, str], model: FakeOpenAI
) -> Iterator[Server]:
    api = ApiProcess(database_url, env=server_env)
    worker = Worker(os.environ | {"RUNQ_DATABASE_URL": database_url, **server_env})
    try:
        api.wait_ready(timeout=START_S)
        yield Server("runq", f"{api.base_url}/langgraph", new_key(database_url), model, worker)
    finally:
        worker.stop()
        api.stop()


@pytest.fixture(scope="package")
def reference_server(server_env: dict[str, str], model: FakeOpenAI) -> Iterator[Server]:
    if not REFERENCE_BIN.exists():
        pytest.fail(
            "the reference is installed by `make conformance-langgraph` (.venv-langgraph-ref)"
        )
    port = free_port()
    proc = subprocess.Popen(
        reference_argv(port),
        cwd=REFERENCE_CWD,
        env=os.environ | server_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_ok(reference_ok_url(port), proc)
        yield Server("reference", f"http://127.0.0.1:{port}", None, model)
    finally:
        stop_process(proc)


@pytest.fixture(scope="package")
def server(request: pytest.FixtureRequest) -> Server:
    """The server the suite runs against (``--langgraph-server``)."""
    name = request.config.getoption("--langgraph-server")
    return request.getfixturevalue(f"{name}_server")


@pytest.fixture
def lg(server: Server) -> LangGraphClient:
    server.model.reset()
    return server.client()


def runq_only(server: Server, why: str) -> None:
    """Skip on the reference: a case where runq is stronger (``why`` says how)."""
    if not server.is_runq:
        pytest.skip(f"runq only: {why}")
