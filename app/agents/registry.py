"""Where registered agents come from: ``RUNQ_AGENTS`` names ``module:Class`` targets, imported
from installed packages, the current directory or runq's project root.

A team's ``myagents.py`` next to the README (or in the image's working directory) must work
without ``PYTHONPATH``; both folders are appended to ``sys.path``, after the installed packages,
so a stray file there cannot shadow a library. An import that fails names the module and every
place searched, because "No module named 'myagents'" alone does not say where to put it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from app.agents.base import Agent
from app.agents.inputs import InputSchema, check_input, input_schema
from app.agents.model_env import share_model_settings
from app.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class UnknownAgent(Exception):
    """The name is not registered in this deployment."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"no agent named {name!r}")
        self.known = known


class AgentImportError(ImportError):
    """A registered agent cannot be imported: the process must not start (its runs would all die)."""


@dataclass(frozen=True, slots=True)
class RegisteredAgent:
    """One ``RUNQ_AGENTS`` entry (or built-in agent), imported."""

    name: str
    target: str  # module:Class
    agent_class: type[Agent]
    origin: str  # the module's file, or where a module without one came from
    schema: InputSchema | None


def search_paths() -> list[Path]:
    """The folders an agent module is looked for in besides the installed packages: the current
    directory and, for a checkout or an image with runq's sources, the project root."""
    folders = [Path.cwd().resolve()]
    if (PROJECT_ROOT / "pyproject.toml").is_file() and PROJECT_ROOT not in folders:
        folders.append(PROJECT_ROOT)
    return folders


def _searchable() -> list[str]:
    """Append the search folders to ``sys.path`` (once each); return them as written there."""
    folders = [str(folder) for folder in search_paths()]
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    return folders


@cache
def load_agent(target: str) -> type[Agent]:
    """Import ``module:Class`` as registered in ``RUNQ_AGENTS`` (once per process; a failure is
    not cached, so a module added later is found)."""
    module_name, colon, attr = target.partition(":")
    if not colon or not module_name or not attr:
        raise AgentImportError(f"{target!r} is not `module:Class`")
    folders = _searchable()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            where = ", ".join(folders)
            raise AgentImportError(
                f"no module named {module_name!r} (searched the installed packages and {where})"
            ) from exc
        raise  # the module was found; something it imports was not
    try:
        agent_class = getattr(module, attr)
    except AttributeError:
        raise AgentImportError(f"module {module_name!r} ({origin_of(module)}) has no {attr!r}") from None
    if not inspect.isclass(agent_class):
        raise AgentImportError(f"{target} is not a class")
    return cast("type[Agent]", agent_class)


def origin_of(thing: object) -> str:
    """The file a module or class was loaded from, or ``built-in`` for one without a file."""
    module = thing if inspect.ismodule(thing) else sys.modules.get(getattr(thing, "__module__", ""))
    path = getattr(module, "__file__", None)
    return str(Path(path).resolve()) if path else "built-in"


def load_agents(registry: Mapping[str, str]) -> dict[str, RegisteredAgent]:
    """Import every registered agent, or raise :class:`AgentImportError` naming the first that fails."""
    agents = {}
    for name, target in registry.items():
        try:
            agent_class = load_agent(target)
            schema = input_schema(agent_class)  # a declared schema that is none fails start-up too
        except Exception as exc:
            raise AgentImportError(f"agent {name!r} ({target}) cannot be imported: {exc}") from exc
        agents[name] = RegisteredAgent(name, target, agent_class, origin_of(agent_class), schema)
    return agents


def start_agents(settings: Settings) -> dict[str, RegisteredAgent]:
    """What a starting API, worker or ``runq dev`` does first: import every registered agent
    (one that cannot be imported refuses the start, rather than failing every run later), with
    ``RUNQ_OPENAI_*`` shared with the SDKs that read ``OPENAI_*`` (app/agents/model_env.py)."""
    share_model_settings(settings)
    return load_agents(settings.agent_registry)


def checked_agent(registry: Mapping[str, str], name: str, value: Mapping[str, Any]) -> type[Agent]:
    """The registered agent ``name``, with ``value`` checked as its input: what a create route
    asks before anything is stored (:class:`UnknownAgent`, :class:`InvalidInput`)."""
    if name not in registry:
        raise UnknownAgent(name, sorted(registry))
    agent_class = load_agent(registry[name])
    check_input(name, agent_class, value)
    return agent_class
