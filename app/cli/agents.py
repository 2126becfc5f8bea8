"""``runq agents``: the agents this configuration registers (built-in and ``RUNQ_AGENTS``), the
file each was imported from and what input it takes; no database needed. An agent that cannot
be imported is listed with the reason, and the command exits 1, as ``runq dev`` would refuse
to start."""

from __future__ import annotations

import argparse
from typing import Any

from app.agents.registry import AgentImportError, RegisteredAgent, load_agents
from app.cli.console import print_json, print_table
from app.settings import BUILTIN_AGENTS, Settings

COLUMNS = ("name", "target", "registered", "input", "origin")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agents = sub.add_parser("agents", help="the registered agents, where each was imported from and its input")
    agents.add_argument("--json", action="store_true", help="machine-readable output, with the input schemas")


def run(settings: Settings, args: argparse.Namespace) -> int:
    rows = [_row(name, target, settings) for name, target in sorted(settings.agent_registry.items())]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, COLUMNS)
    return 1 if any("error" in row for row in rows) else 0


def _row(name: str, target: str, settings: Settings) -> dict[str, Any]:
    registered = "built-in" if BUILTIN_AGENTS.get(name) == target and name not in settings.agents else "RUNQ_AGENTS"
    row: dict[str, Any] = {"name": name, "target": target, "registered": registered}
    try:
        agent = load_agents({name: target})[name]
    except AgentImportError as exc:
        return row | {"input": None, "origin": f"cannot be imported: {exc.__cause__ or exc}", "error": str(exc)}
    return row | {"input": _input(agent), "origin": agent.origin, "input_schema": agent.schema and agent.schema.json_schema}


def _input(agent: RegisteredAgent) -> str:
    declared = getattr(agent.agent_class, "input_schema", None)
    if declared is None:
        return "any object"
    return f"pydantic {declared.__name__}" if isinstance(declared, type) else "JSON Schema"
