"""Where a command looks for the embedded database: the project root, never the current folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.db.runtime import NoDatabase, data_dir, database, project_root
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RUNQ = str(Path(sys.executable).parent / "runq")


def test_the_project_root_is_found_from_a_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    deep = tmp_path / "src" / "agents"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert project_root(deep) == tmp_path
    assert data_dir(Settings(data_dir=None, database_url=None)) == tmp_path / ".runq"
    assert data_dir(Settings(data_dir=str(tmp_path / "elsewhere"))) == tmp_path / "elsewhere"


def test_outside_any_project_the_checkout_runq_runs_from_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # /tmp holds no pyproject.toml or .git above it
    assert project_root(tmp_path) is None
    assert data_dir(Settings(data_dir=None, database_url=None)) == ROOT / ".runq"


def test_no_database_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    settings = Settings(data_dir=str(folder), database_url=None)
    with pytest.raises(NoDatabase, match="start one with `runq dev`"), database(settings):
        pass
    assert not folder.exists()

    env = {k: v for k, v in os.environ.items() if k != "RUNQ_DATABASE_URL"} | {"RUNQ_DATA_DIR": str(folder)}
    result = subprocess.run([RUNQ, "stats"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        f"runq: no database in {folder}: start one with `runq dev` (or `make run`), or set RUNQ_DATABASE_URL\n"
    )
    assert not folder.exists()


def test_an_agent_that_cannot_import_stops_the_worker_at_once(tmp_path: Path) -> None:
    env = os.environ | {"RUNQ_AGENTS": "ghost=nosuchmodule:Ghost", "RUNQ_DATABASE_URL": "postgresql://x@127.0.0.1:9/x"}
    for command in (["worker"], ["api", "--port", "9"]):
        result = subprocess.run([RUNQ, *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1
        assert result.stderr == (
            "runq: agent 'ghost' (nosuchmodule:Ghost) cannot be imported: no module named 'nosuchmodule' "
            f"(searched the installed packages and {tmp_path.resolve()}, {ROOT})\n"
        )
