"""examples/own-agent/: the two Docker recipes for a team's agents (an image built FROM runq's,
a module mounted into it), checked without a Docker daemon against the files they build on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.agents.registry import load_agents
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-agent"


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    lines = [line for line in dockerfile.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [(word.upper(), rest.strip()) for word, _, rest in (line.partition(" ") for line in lines)]


def _workdir() -> str:
    return next(arg for op, arg in _instructions(ROOT / "Dockerfile") if op == "WORKDIR")


def _compose(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_the_image_recipe_starts_from_runqs_and_lands_in_its_working_directory() -> None:
    steps = _instructions(EXAMPLE / "Dockerfile")
    assert steps[0] == ("ARG", "RUNQ_IMAGE=runq") and steps[1] == ("FROM", "${RUNQ_IMAGE}")
    base = _compose(ROOT / "docker-compose.yml")["x-runq"]["image"]
    assert base == "${RUNQ_IMAGE:-runq}"  # `docker compose build` tags the image this one starts FROM
    assert "WORKDIR" not in dict(steps)  # the base's /srv/runq: RUNQ_AGENTS imports from there
    copies = [arg.split() for op, arg in steps if op == "COPY"]
    assert copies and all(dest == "./" and (EXAMPLE / src).is_file() for src, dest in copies)
    env = dict(arg.split("=", 1) for op, arg in steps if op == "ENV")
    assert env["RUNQ_AGENTS"] == "counter=myagents:Counter"


def test_the_mounted_module_recipe_overrides_real_services() -> None:
    override = _compose(EXAMPLE / "compose.agents.yml")
    services = _compose(ROOT / "docker-compose.yml")["services"]
    assert set(override["services"]) == {"api", "worker"} <= set(services)
    for service in override["services"].values():
        assert service["environment"]["RUNQ_AGENTS"] == "counter=myagents:Counter"
        [volume] = service["volumes"]
        source, target, mode = volume.split(":")
        assert (ROOT / source).is_file() and mode == "ro"  # relative to the first file's folder
        assert target == f"{_workdir()}/{Path(source).name}"


def test_the_registered_target_imports_from_the_folder_it_is_copied_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE)  # what /srv/runq holds in the image: the module next to runq
    registry = Settings(agents="counter=myagents:Counter").agent_registry  # type: ignore[arg-type]
    counter = load_agents(registry)["counter"]
    assert counter.origin == str(EXAMPLE / "myagents.py")
    assert counter.schema is not None and counter.schema.json_schema["properties"]["to"]["minimum"] == 1


def test_the_readme_and_the_module_say_how_to_run_it_with_make_run() -> None:
    for text in ((EXAMPLE / "README.md").read_text(), (EXAMPLE / "myagents.py").read_text()):
        assert "cp examples/own-agent/myagents.py ." in text
        assert re.search(r"RUNQ_AGENTS=counter=myagents:Counter make run", text)
