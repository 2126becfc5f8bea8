"""LangGraph's own server, ``langgraph dev`` (``langgraph-cli[inmem]``), started as the
conformance suite (tests/langgraph_server/conftest.py) and the bench (bench/langgraph_server.py)
both start it: from the venv the Makefile's ``$(REF_VENV)`` rule installs, serving the graphs of
``app/langgraph.json``, which reach a model only through ``LANGGRAPH_TEST_MODEL_URL``.

runq serves the same file (``RUNQ_LANGGRAPH_CONFIG=CONFIG``), so both servers run one graph."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).parent / "app"
CONFIG = APP / "langgraph.json"
REFERENCE_VENV = Path(__file__).resolve().parents[2] / ".venv-langgraph-ref"
REFERENCE_BIN = REFERENCE_VENV / "bin" / "langgraph"
# `langgraph dev` resolves graph paths against its working directory, and keeps its state
# there between starts (.langgraph_api/, pickled threads, runs and checkpoints)
REFERENCE_CWD = APP


def reference_argv(port: int, *, jobs: int = 4, config: Path = CONFIG) -> list[str]:
    """``langgraph dev`` on ``port`` with ``jobs`` runs at once, no browser, no reloader."""
    return [
        str(REFERENCE_BIN),
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(port),
        "--config",
        str(config),
        "--n-jobs-per-worker",
        str(jobs),
    ]


def reference_ok_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/ok"
