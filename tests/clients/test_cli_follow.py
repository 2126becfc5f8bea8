"""``runq runs follow`` against a real API and worker, through the fault proxy: the lines it
prints are the run's stored log, each event once, however often the connection was cut."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from runq_client import Client

from app.cli import main as cli
from tests.api_support import ROOT, ApiProcess
from tests.clients.faultproxy import FaultProxy
from tests.clients.test_stream_faults import budgets

DEMO = {"prompt": "followed from a terminal, über Umwege ✓", "steps": 6, "step_s": 0.1}


def follow(*args: str, url: str, key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "runs", "follow", *args],
        cwd=ROOT,
        env=os.environ | {"RUNQ_URL": url, "RUNQ_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
    )


def stored_lines(client: Client, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    page = client.runs.events(run_id, after=after, limit=1000)
    return [{"seq": e.seq, "type": e.type, "data": e.data} for e in page.items]


def test_follow_prints_the_stored_log_through_random_cuts(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    with Client(api.base_url, api_key) as direct, FaultProxy(api.port, budgets(3, most=900)) as proxy:
        runs = [direct.runs.create("demo", DEMO) for _ in range(3)]
        outputs = [follow(run.id, "--json", url=proxy.base_url, key=api_key) for run in runs]
        for run, done in zip(runs, outputs, strict=True):
            assert done.returncode == 0, done.stderr
            log = stored_lines(direct, run.id)
            assert [json.loads(line) for line in done.stdout.splitlines()] == log
            assert log[-1]["type"] == "run.completed" and [e["seq"] for e in log] == list(range(1, len(log) + 1))
        print(f"{len(runs)} runs followed by the CLI through {proxy.cuts} cuts")
        assert proxy.cuts >= 3
        resumed = follow(runs[0].id, "--after", "4", url=api.base_url, key=api_key)
        assert resumed.returncode == 0, resumed.stderr
        seqs = [int(line.split()[0]) for line in resumed.stdout.splitlines()]
        assert seqs == [e["seq"] for e in stored_lines(direct, runs[0].id, after=4)]
        assert resumed.stdout.splitlines()[-1].split()[1] == "run.completed"


def test_follow_exits_1_with_the_problem_code(api: ApiProcess, api_key: str) -> None:
    unknown = follow(str(uuid.uuid4()), url=api.base_url, key=api_key)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.startswith("runq: not_found: ")
    refused = follow(str(uuid.uuid4()), url=api.base_url, key="rq_not-a-key")
    assert refused.returncode == 1 and refused.stderr.startswith("runq: unauthorized: ")


def test_follow_without_the_client_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "runq_client", None)  # what `import runq_client` finds then fails
    assert cli.main(["runs", "follow", str(uuid.uuid4()), "--key", "rq_x"]) == 1
    assert "pip install -e clients/python" in capsys.readouterr().err


def follow_from_database(*args: str, database_url: str) -> subprocess.Popen[str]:
    """``runq runs follow`` as an operator: no URL, no key, the database of the other commands."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUNQ_URL", "RUNQ_KEY")}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "runs", "follow", *args],
        cwd=ROOT,
        env=env | {"RUNQ_DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_follow_without_url_or_key_reads_the_database(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str, database_url: str
) -> None:
    with Client(api.base_url, api_key) as direct:
        finished = direct.runs.create("demo", {"prompt": "already over", "steps": 1, "step_s": 0})
        direct.runs.wait(finished.id, timeout=30)
        live = direct.runs.create("demo", {**DEMO, "steps": 8, "step_s": 0.2})
        followers = {
            run.id: follow_from_database(run.id, "--json", database_url=database_url) for run in (finished, live)
        }
        for run_id, proc in followers.items():
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            assert [json.loads(line) for line in out.splitlines()] == stored_lines(direct, run_id)
            assert json.loads(out.splitlines()[-1])["type"] == "run.completed"
        later = follow_from_database(live.id, "--after", "3", database_url=database_url)
        out, err = later.communicate(timeout=60)
        assert later.returncode == 0, err
        assert [int(line.split()[0]) for line in out.splitlines()] == [e["seq"] for e in stored_lines(direct, live.id, 3)]
        unknown = follow_from_database(str(uuid.uuid4()), database_url=database_url)
        _, err = unknown.communicate(timeout=60)
        assert unknown.returncode == 1 and "no run with id" in err


def test_follow_reports_a_closed_port_within_seconds() -> None:
    from tests.api_support import free_port

    started = time.monotonic()
    refused = follow(str(uuid.uuid4()), url=f"http://127.0.0.1:{free_port()}", key="rq_x")
    assert refused.returncode == 1 and refused.stderr.startswith("runq: connection_error")
    assert time.monotonic() - started < 10
