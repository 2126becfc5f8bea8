"""runq as ``pip install runq`` (or ``make run``) installs it: the API, the worker and the CLI
import with the base dependencies alone. Run in a subprocess in which importing any third-party
module that the base requirements (and theirs, recursively) do not bring fails, as it does where
only those are installed: a module used by runq but installed here only by an extra or the dev
tools (orjson came with LangGraph) would otherwise pass every other test and fail the first
``make run``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.api_support import ROOT

BASE_ONLY = textwrap.dedent(
    """
    import importlib.abc, importlib.metadata as md, re, sys, tomllib
    from packaging.requirements import Requirement

    def closure(requirements, seen, extras=("",)):
        for requirement in map(Requirement, requirements):
            if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in extras):
                continue  # an extra's that was not asked for
            key = re.sub(r"[-_.]+", "-", requirement.name).lower()
            wanted = ("", *sorted(requirement.extras))
            if {(key, e) for e in wanted} <= seen:
                continue
            seen |= {(key, e) for e in wanted}
            closure(md.requires(requirement.name) or [], seen, wanted)
        return seen

    with open("pyproject.toml", "rb") as file:  # the source, not what was installed from it
        installed = {key for key, _ in closure(tomllib.load(file)["project"]["dependencies"], set())} | {"runq"}
    allowed = {
        module for module, dists in md.packages_distributions().items()
        if any(re.sub(r"[-_.]+", "-", d).lower() in installed for d in dists)
    }
    owned = {module for module, dists in md.packages_distributions().items()}

    class BaseOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in owned and top not in allowed:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, BaseOnly())
    import app.main, app.worker.main, app.cli  # the API (create_app() ran), the worker, the CLI
    import app.api.protocols.ai_sdk, app.api.protocols.ag_ui
    """
)


def test_the_api_worker_and_cli_import_with_the_base_dependencies_alone() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BASE_ONLY], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
