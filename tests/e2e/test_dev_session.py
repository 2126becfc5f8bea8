"""A new user's second terminal: while `runq dev` serves, other runq commands use its database.

Before, `runq runs list` (or `keys create`, an extra `runq worker`, a second `runq dev`) started
its own embedded server on the same data and so shut the dev server down. Here every one of
them runs from a subfolder of the project (the data folder is found from the project root),
and the dev server answers /readyz with 200 all along while runs complete on both workers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.postmaster import server_pids
from tests.api_support import ROOT, free_port

RUNQ = str(Path(sys.executable).parent / "runq")
FAST = {
    "RUNQ_LEASE_S": "2",
    "RUNQ_HEARTBEAT_S": "0.5",
    "RUNQ_POLL_S": "0.2",
    "RUNQ_REAPER_S": "0.5",
    # Longer than the 15 s after which `runq dev` used to kill its worker: a run in flight at
    # Ctrl-C must be released, not left leased for a whole lease after the restart.
    "RUNQ_SHUTDOWN_GRACE_S": "16",
    "RUNQ_LOG_LEVEL": "warning",
}


def _env() -> dict[str, str]:
    """The user's environment: no database URL and no data dir, so runq finds .runq/ itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUNQ_DATABASE_URL", "RUNQ_DATA_DIR")}
    return env | FAST


def _wait(check: Callable[[], Any], within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.1)
    return result


@dataclass
class ReadyWatch:
    """Polls /readyz in a thread; every answer that was not 200 is kept."""

    url: str
    failures: list[str] = field(default_factory=list)
    checks: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(0.1):
                try:
                    status = client.get(self.url).status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.checks += 1
                if status != 200:
                    self.failures.append(str(status))

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def project() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="runq-dev-", dir="/tmp"))
    root.chmod(0o755)  # as root the server runs as nobody, who must reach the data folder
    (root / "pyproject.toml").write_text('[project]\nname = "my-agents"\n')
    (root / "agents").mkdir()
    shutil.copy(ROOT / "examples" / "own-agent" / "myagents.py", root / "myagents.py")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stop(proc: subprocess.Popen[Any], timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def _runq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RUNQ, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=90)


def test_second_terminal_uses_the_dev_database(project: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    out, err = project / "dev.out", project / "dev.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        dev = subprocess.Popen(
            [RUNQ, "dev", "--port", str(port), "--concurrency", "1"],
            cwd=project, env=_env() | {"RUNQ_AGENTS": "counter=myagents:Counter"}, stdout=stdout, stderr=stderr,
        )  # fmt: skip
    watch = ReadyWatch(f"{base}/readyz")
    watcher = threading.Thread(target=watch.run)
    worker: subprocess.Popen[bytes] | None = None
    elsewhere = project / "agents"  # a subfolder: the data folder comes from the project root
    try:
        banner = _wait(lambda: "Ctrl-C stops everything" in out.read_text() and out.read_text(), 90, "runq dev up")
        admin_key = re.search(r"export RUNQ_KEY=(\S+)", banner)[1]  # type: ignore[index]
        record = (project / ".runq" / "server.json").read_text()
        assert f'"pid": {dev.pid}' in record and '"command": "runq dev"' in record
        db_url = re.search(r"Database: (\S+)", banner)[1]  # type: ignore[index]
        assert db_url in record and f"{RUNQ} runs list" in banner
        assert f"export RUNQ_URL={base}\n" in banner and f"{RUNQ} runs follow <id>" in banner
        watcher.start()

        listed = _runq(elsewhere, "runs", "list")
        assert listed.returncode == 0, listed.stderr
        # The team's agents are the server's: no RUNQ_AGENTS here, the dev key from .runq/.
        agents = _runq(elsewhere, "agents", "--json")
        assert agents.returncode == 0 and f"the agents of the API at {base}" in agents.stderr, agents.stderr
        assert {a["name"] for a in json.loads(agents.stdout)} == {"counter", "demo", "openai"}
        key = _runq(elsewhere, "keys", "create", "--tenant", "acme")
        assert key.returncode == 0 and key.stdout.startswith("rq_"), key.stderr
        second_dev = _runq(elsewhere, "dev", "--port", str(free_port()))
        assert second_dev.returncode == 1
        assert f"already served by pid {dev.pid}" in second_dev.stderr and base in second_dev.stderr
        worker = subprocess.Popen([RUNQ, "worker", "--concurrency", "1"], cwd=elsewhere, env=_env())

        tenant = {"Authorization": f"Bearer {key.stdout.strip()}"}
        admin = {"Authorization": f"Bearer {admin_key}"}
        with httpx.Client(base_url=base, timeout=10) as client:
            ids = [
                client.post("/runs", headers=tenant, json={"agent": "demo", "input": {"steps": 4, "step_s": 0.5}}).json()["id"]
                for _ in range(4)
            ]
            # One slot each: two workers hold leases at once only if the second one shares the database.
            _wait(
                lambda: sum(bool(w["leases"]) for w in client.get("/admin/workers", headers=admin).json()["items"]) == 2,
                60,
                "both workers leasing",
            )
            _wait(
                lambda: all(client.get(f"/runs/{i}", headers=tenant).json()["status"] == "done" for i in ids),
                90,
                "every run done",
            )
            followed = subprocess.run(
                [RUNQ, "runs", "follow", ids[0], "--json"], cwd=elsewhere, capture_output=True, text=True,
                env=_env() | {"RUNQ_URL": base, "RUNQ_KEY": key.stdout.strip()}, timeout=60,
            )  # fmt: skip
            assert followed.returncode == 0, followed.stderr
            log = client.get(f"/runs/{ids[0]}/events", headers=tenant | {"Accept": "application/json"}).json()["items"]
            assert [json.loads(line) for line in followed.stdout.splitlines()] == [
                {"seq": e["seq"], "type": e["type"], "data": e["data"]} for e in log
            ]
            assert _stop(worker) == 0
            assert dev.poll() is None, "runq dev exited while the second terminal was busy"
            # In flight at Ctrl-C: longer than the grace, so the worker releases it at the end.
            long = client.post("/runs", headers=tenant, json={"agent": "demo", "input": {"steps": 200, "step_s": 0.2}})
            long_id = long.json()["id"]
            _wait(lambda: client.get(f"/runs/{long_id}", headers=tenant).json()["status"] == "leased", 30, "leased")
    finally:
        watch.stop()
        if watcher.is_alive():
            watcher.join()
        if worker is not None and worker.poll() is None:
            worker.kill()
        code = _stop(dev, timeout=60)
    assert watch.checks > 0 and not watch.failures, f"/readyz failed {len(watch.failures)} times: {watch.failures[:5]}"
    assert code == 0
    assert "the worker has up to 16 s (RUNQ_SHUTDOWN_GRACE_S)" in err.read_text()
    assert not (project / ".runq" / "server.json").exists()
    assert not server_pids(project / ".runq" / "pgdata"), "runq dev left its server running"
    # No server runs now: this command starts one on the data for itself, and stops it again.
    shown = _runq(elsewhere, "runs", "show", long_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"status": "pending"' in shown.stdout and '"locked_by": null' in shown.stdout
    assert not server_pids(project / ".runq" / "pgdata")
