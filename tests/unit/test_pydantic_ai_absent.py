"""runq without the ``pydantic-ai`` extra: the API, the worker, the CLI and the built-in agents
import and none of them loads pydantic-ai. Run in subprocesses, one in which importing it fails
as it does where the extra is not installed, one in which it is installed but nobody asked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.api_support import ROOT

WITHOUT_EXTRA = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoPydanticAI(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pydantic_ai" or name.startswith("pydantic_ai."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoPydanticAI())
    import app.main, app.worker.main, app.cli.main, app.agents.openai, app.agents.demo
    from app.settings import Settings
    from app.agents.registry import load_agents

    load_agents(Settings().agent_registry)  # the built-in agents
    try:
        import app.agents.pydantic_ai
    except ModuleNotFoundError as exc:
        assert exc.name == "pydantic_ai", exc
    else:
        raise AssertionError("the adapter imported without pydantic-ai")
    print("ok")
    """
)

NOT_ASKED = textwrap.dedent(
    """
    import sys
    import app.main, app.worker.main, app.cli.main, app.agents.openai, app.agents.demo
    loaded = [m for m in sys.modules if m == "pydantic_ai" or m.startswith(("pydantic_ai.", "app.agents.pydantic_ai"))]
    assert not loaded, loaded
    print("ok")
    """
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_runq_runs_without_the_extra() -> None:
    result = _python(WITHOUT_EXTRA)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_runq_loads_pydantic_ai_only_for_an_agent_that_uses_it() -> None:
    result = _python(NOT_ASKED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
