"""``runq agents``: what the configuration registers and where each agent came from, run as a
user runs it (the console script, a module in the current directory, no PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.test_agent_registry import AGENT_MODULE

ROOT = Path(__file__).resolve().parents[2]
RUNQ = str(Path(sys.executable).parent / "runq")


def _runq(cwd: Path, agents: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"RUNQ_AGENTS": agents}
    return subprocess.run([RUNQ, "agents", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_lists_built_in_and_own_agents_with_their_origin(tmp_path: Path) -> None:
    (tmp_path / "cli_team_agents.py").write_text(AGENT_MODULE)
    done = _runq(tmp_path, "counter=cli_team_agents:Counter", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert list(rows) == ["counter", "demo", "openai"]
    assert rows["counter"] | {"input_schema": None} == {
        "name": "counter", "target": "cli_team_agents:Counter", "registered": "RUNQ_AGENTS",
        "input": "JSON Schema", "origin": str(tmp_path.resolve() / "cli_team_agents.py"), "input_schema": None,
    }  # fmt: skip
    assert rows["counter"]["input_schema"]["properties"] == {"to": {"type": "integer"}}
    assert (rows["demo"]["registered"], rows["demo"]["input"]) == ("built-in", "pydantic DemoInput")
    assert rows["demo"]["origin"] == str(ROOT / "app" / "agents" / "demo.py")

    table = _runq(tmp_path, "counter=cli_team_agents:Counter").stdout.splitlines()
    assert table[0].split() == ["NAME", "TARGET", "REGISTERED", "INPUT", "ORIGIN"]
    assert table[1].split()[:3] == ["counter", "cli_team_agents:Counter", "RUNQ_AGENTS"]


def test_an_agent_that_cannot_be_imported_is_listed_with_the_reason(tmp_path: Path) -> None:
    done = _runq(tmp_path, "ghost=no_such_team_module:Ghost")
    assert done.returncode == 1
    ghost = next(line for line in done.stdout.splitlines() if line.startswith("ghost"))
    assert "cannot be imported: no module named 'no_such_team_module'" in ghost
    assert str(tmp_path.resolve()) in ghost and str(ROOT) in ghost
    assert "demo" in done.stdout  # the others are still listed
