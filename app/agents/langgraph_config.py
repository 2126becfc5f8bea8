"""Graphs from a ``langgraph.json`` (LangGraph CLI's file; DESIGN §17), as runq agents.

Each entry of ``graphs`` (``"./path.py:attr"``, relative to the file's folder, or
``"module:attr"``) becomes an agent named by its graph id whose target is
``app.agents.langgraph.graphs:<graph id>@<config file>``: the worker and the API import it the
way they import every ``RUNQ_AGENTS`` target, so a graph is loaded once per process and a file
that cannot be imported refuses the start. Keys runq does not use are named in one warning.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

GRAPHS_MODULE = "app.agents.langgraph.graphs"
USED_KEYS = frozenset({"graphs"})
log = logging.getLogger(__name__)


class GraphConfigError(ValueError):
    """The ``langgraph.json`` cannot be read, or a graph it names cannot be loaded."""


@dataclass(frozen=True, slots=True)
class GraphConfig:
    path: Path
    graphs: dict[str, str]  # graph id -> "./file.py:attr" or "module:attr"


@cache
def read_config(path: Path) -> GraphConfig:
    """The file's graphs (read once per process); its unused keys are named in one warning."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GraphConfigError(f"cannot read {path}: {exc}") from exc
    graphs = data.get("graphs") if isinstance(data, dict) else None
    if not isinstance(graphs, dict) or not all(isinstance(v, str) for v in graphs.values()):
        raise GraphConfigError(f'{path} has no "graphs" object of "path:attr" strings')
    unused = sorted(set(data) - USED_KEYS)
    if unused:
        log.warning("%s: runq does not use the keys %s", path, ", ".join(unused))
    return GraphConfig(path=path.resolve(), graphs=dict(graphs))


def graph_agents(path: Path) -> dict[str, str]:
    """``RUNQ_AGENTS``-style entries for the file's graphs: graph id -> import target."""
    config = read_config(path)
    return {graph_id: f"{GRAPHS_MODULE}:{graph_id}@{config.path}" for graph_id in config.graphs}


def load_graph(spec: str, *, base: Path) -> Any:
    """The object a graph entry names: ``./file.py:attr`` (relative to ``base``) or
    ``module:attr`` (an importable module, as the LangGraph CLI allows)."""
    where, colon, attr = spec.rpartition(":")
    if not colon or not where or not attr:
        raise GraphConfigError(f"{spec!r} is not `path.py:attr` or `module:attr`")
    if where.endswith(".py") or "/" in where:
        file = (base / where).resolve()
        name = f"_runq_langgraph_{abs(hash(str(file)))}"
        module = sys.modules.get(name)
        if module is None:
            loader = importlib.util.spec_from_file_location(name, file)
            if loader is None or loader.loader is None or not file.is_file():
                raise GraphConfigError(f"no file {file} (graph {spec!r})")
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            if (
                str(file.parent) not in sys.path
            ):  # its sibling modules import, as under `langgraph dev`
                sys.path.append(str(file.parent))
            loader.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise GraphConfigError(f"{where} has no {attr!r}") from None
