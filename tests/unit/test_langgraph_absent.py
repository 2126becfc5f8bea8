"""runq without the ``langgraph`` extra: the API, the worker, the queue (with the saver's SQL)
and the built-in agents import, and nothing of LangGraph or LangChain is loaded. Run in a
subprocess in which importing them fails, as it does where the extra is not installed; with it
installed, still nothing is loaded until a LangGraph agent is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.api_support import ROOT

WITHOUT_LANGGRAPH = textwrap.dedent(
    """
    import importlib.abc, sys

    EXTRA = ("langgraph", "langchain_core", "langchain_openai", "langsmith")

    class NoLangGraph(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in EXTRA:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoLangGraph())

    import app.main, app.worker.main, app.agents.openai, app.agents.demo, app.queue, app.cli.main
    from app.queue import GraphCheckpoints
    try:
        import app.agents.langgraph
    except ModuleNotFoundError as exc:
        assert exc.name.split(".")[0] in EXTRA, exc
    else:
        raise AssertionError("app.agents.langgraph imported without LangGraph")
    assert not [m for m in sys.modules if m.split(".")[0] in EXTRA]
    print("ok")
    """
)

NOT_LOADED = textwrap.dedent(
    """
    import sys
    import app.main, app.worker.main, app.agents.openai, app.queue
    assert not [m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core")]
    import app.agents.langgraph
    assert "langgraph" in sys.modules
    print("ok")
    """
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_runq_runs_without_the_langgraph_extra() -> None:
    result = _python(WITHOUT_LANGGRAPH)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_langgraph_is_loaded_only_with_a_langgraph_agent() -> None:
    result = _python(NOT_LOADED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
