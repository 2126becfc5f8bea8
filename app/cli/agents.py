"""``runq agents``: the agents runq runs, with what input each takes.

Beside a running ``runq dev`` the answer is the server's (``GET /agents`` with its dev key, or
``RUNQ_KEY``): a second terminal sees the team's agents without repeating ``RUNQ_AGENTS`` and
``PYTHONPATH``. Otherwise, or with ``--local``, the agents this configuration registers
(built-in and ``RUNQ_AGENTS``), the file each was imported from, with no database needed; an
agent that cannot be imported is listed with the reason, and the command exits 1, as
``runq dev`` would refuse to start.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import httpx

from app.agents.model_env import share_model_settings
from app.agents.registry import AgentImportError, RegisteredAgent, load_agents
from app.cli.console import print_json, print_table
from app.cli.dev_key import read_dev_key
from app.db.runtime import NoDatabase, advertised_api, data_dir
from app.settings import BUILTIN_AGENTS, Settings

COLUMNS = ("name", "target", "registered", "input", "origin")
SERVED_COLUMNS = ("name", "input", "description")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agents = sub.add_parser("agents", help="the agents runq runs (the running runq dev's, else this configuration's)")
    agents.add_argument("--json", action="store_true", help="machine-readable output, with the input schemas")
    agents.add_argument("--local", action="store_true", help="this configuration's agents, even beside a runq dev")


def run(settings: Settings, args: argparse.Namespace) -> int:
    served = None if args.local else _served(settings)
    if served is not None:
        api, rows = served
        print(f"the agents of the API at {api} (runq dev; --local for this configuration's)", file=sys.stderr)
        print_json(rows) if args.json else print_table(rows, SERVED_COLUMNS)
        return 0
    share_model_settings(settings)
    rows = [_row(name, target, settings) for name, target in sorted(settings.agent_registry.items())]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, COLUMNS)
    return 1 if any("error" in row for row in rows) else 0


def _served(settings: Settings) -> tuple[str, list[dict[str, Any]]] | None:
    """The running ``runq dev``'s agents, or None when there is none to ask (or it will not say)."""
    api = advertised_api(settings)
    if api is None:
        return None
    try:
        key = os.environ.get("RUNQ_KEY") or read_dev_key(data_dir(settings))
    except NoDatabase:
        return None
    if key is None:
        return None
    try:
        response = httpx.get(f"{api}/agents", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    rows = [
        {
            "name": item["name"],
            "input": "JSON Schema" if item.get("input_schema") else "any object",
            "description": item.get("description") or "",
            "input_schema": item.get("input_schema"),
        }
        for item in response.json()["items"]
    ]
    return api, rows


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
