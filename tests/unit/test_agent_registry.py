"""``RUNQ_AGENTS`` targets: imported from the current directory and the project root without
``PYTHONPATH``; an import that fails names the module and where it was looked for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from app.agents.demo import DemoAgent
from app.agents.registry import PROJECT_ROOT, AgentImportError, load_agents, search_paths
from app.settings import BUILTIN_AGENTS

AGENT_MODULE = textwrap.dedent(
    """
    class Counter:
        input_schema = {"type": "object", "properties": {"to": {"type": "integer"}}}

        async def run(self, ctx):
            return {"counted": ctx.input.get("to", 3)}
    """
)


def _module_name() -> str:
    return f"agents_{uuid.uuid4().hex[:8]}"  # fresh per test: imported modules stay in sys.modules


def test_a_module_in_the_current_directory_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module_name()
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    loaded = load_agents({"counter": f"{name}:Counter"})["counter"]
    assert loaded.agent_class.__name__ == "Counter"
    assert loaded.origin == str(tmp_path.resolve() / f"{name}.py")
    assert loaded.schema is not None and loaded.schema.json_schema["properties"]["to"] == {"type": "integer"}


def test_the_search_paths_are_the_current_directory_and_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert search_paths() == [tmp_path.resolve(), PROJECT_ROOT]
    monkeypatch.chdir(PROJECT_ROOT)
    assert search_paths() == [PROJECT_ROOT]


def test_a_missing_module_names_the_places_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentImportError) as caught:
        load_agents({"counter": "no_such_agents_module:Counter"})
    message = str(caught.value)
    assert "agent 'counter' (no_such_agents_module:Counter)" in message
    assert "no module named 'no_such_agents_module'" in message
    assert str(tmp_path.resolve()) in message and str(PROJECT_ROOT) in message


def test_a_missing_class_and_a_bad_target_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module_name()
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentImportError, match=f"module '{name}' .*{name}.py.* has no 'Nope'"):
        load_agents({"x": f"{name}:Nope"})
    with pytest.raises(AgentImportError, match="is not `module:Class`"):
        load_agents({"x": name})


def test_a_dependency_the_module_lacks_is_reported_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module_name()
    (tmp_path / f"{name}.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentImportError, match="No module named 'not_installed_dependency_xyz'"):
        load_agents({"x": f"{name}:Counter"})


def test_an_input_schema_that_is_not_one_fails_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module_name()
    (tmp_path / f"{name}.py").write_text(
        "class Bad:\n    input_schema = {'type': 'nonsense'}\n\nclass Odd:\n    input_schema = 42\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentImportError, match="not a valid JSON Schema"):
        load_agents({"x": f"{name}:Bad"})
    with pytest.raises(AgentImportError, match="pydantic model or a JSON Schema dict"):
        load_agents({"x": f"{name}:Odd"})


def test_built_in_agents_come_from_runq() -> None:
    loaded = load_agents(BUILTIN_AGENTS)
    assert loaded["demo"].agent_class is DemoAgent
    assert loaded["demo"].origin.endswith("app/agents/demo.py")
    assert {name for name, agent in loaded.items() if agent.schema is None} == set()


def test_runq_started_elsewhere_finds_a_module_next_to_the_readme(tmp_path: Path) -> None:
    """What `make run` does: a console script, whose sys.path holds neither folder."""
    name = _module_name()
    module = PROJECT_ROOT / f"{name}.py"
    module.write_text(AGENT_MODULE)
    try:
        code = f"from app.agents.registry import load_agents; print(load_agents({{'c': '{name}:Counter'}})['c'].origin)"
        done = subprocess.run(
            [sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
    finally:
        module.unlink()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(module)
