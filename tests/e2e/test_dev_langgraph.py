"""`runq dev` started in a LangGraph app's folder serves the graphs of its `langgraph.json` under
/langgraph (DESIGN §17), as `langgraph dev` would: the SDK runs one with the dev key."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_sync_client

from tests.api_support import free_port
from tests.e2e.test_dev_session import RUNQ, _env, _stop, _wait
from tests.langgraph_server.reference import APP


@pytest.fixture
def langgraph_app() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="runq-dev-langgraph-", dir="/tmp"))
    root.chmod(0o755)  # as root the server runs as nobody, who must reach the data folder
    for name in ("langgraph.json", "graphs.py"):
        shutil.copy(APP / name, root / name)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_runq_dev_serves_the_folders_langgraph_json(langgraph_app: Path) -> None:
    port = free_port()
    out = langgraph_app / "dev.out"
    with open(out, "w") as stdout, open(langgraph_app / "dev.err", "w") as stderr:
        dev = subprocess.Popen(
            [RUNQ, "dev", "--port", str(port), "--concurrency", "2"], cwd=langgraph_app, env=_env(),
            stdout=stdout, stderr=stderr,
        )  # fmt: skip
    try:
        banner = _wait(lambda: "Ctrl-C stops everything" in out.read_text() and out.read_text(), 90, "runq dev up")
        key = re.search(r"export RUNQ_KEY=(\S+)", banner)[1]  # type: ignore[index]
        client = get_sync_client(url=f"http://127.0.0.1:{port}/langgraph", api_key=key)
        graphs = {a["graph_id"] for a in client.assistants.search(limit=100)}
        assert graphs == set(json.loads((APP / "langgraph.json").read_text())["graphs"])
        assert client.runs.wait(None, "counter", input={"count": 2}) == {"count": 30, "steps": ["one", "two"]}
        assert "runq does not use the keys dependencies, env" in (langgraph_app / "dev.err").read_text()
    finally:
        assert _stop(dev) == 0
