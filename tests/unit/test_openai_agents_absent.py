"""runq without the ``openai-agents`` extra: the API, the worker, the CLI and the built-in agents
import and none of them loads the SDK (its import name is ``agents``). Run in subprocesses, one
in which importing it fails as it does where the extra is not installed, one in which it is
installed but no agent asked for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.api_support import ROOT

IMPORT_RUNQ = """
import app.main, app.worker.main, app.cli.main, app.agents.openai, app.agents.demo
from app.agents.registry import load_agents
from app.settings import Settings

load_agents(Settings().agent_registry)  # the built-in agents
"""

WITHOUT_EXTRA = (
    textwrap.dedent(
        """
        import importlib.abc, sys

        class NoSDK(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "agents" or name.startswith("agents."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoSDK())
        """
    )
    + IMPORT_RUNQ
    + textwrap.dedent(
        """
        try:
            import app.agents.openai_agents
        except ModuleNotFoundError as exc:
            assert exc.name == "agents", exc
        else:
            raise AssertionError("the adapter imported without the SDK")
        print("ok")
        """
    )
)

NOT_ASKED = IMPORT_RUNQ + textwrap.dedent(
    """
    import sys
    loaded = [m for m in sys.modules if m == "agents" or m.startswith(("agents.", "app.agents.openai_agents"))]
    assert not loaded, loaded
    print("ok")
    """
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_runq_runs_without_the_extra() -> None:
    result = _python(WITHOUT_EXTRA)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_runq_loads_the_sdk_only_for_an_agent_that_uses_it() -> None:
    result = _python(NOT_ASKED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
