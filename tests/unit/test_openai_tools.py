"""The tool registry, the shell tool and how a call becomes a result."""

from __future__ import annotations

from typing import Any

import pytest

from app.agents.base import BudgetExceeded, FatalError, RunContext
from app.agents.tools import SHELL, Tool, ToolRegistry, invoke
from tests.fakes.run_context import FakeRunContext


async def _noop(ctx: RunContext, args: dict[str, Any]) -> None:
    return None


def test_decorator_registers_name_docstring_and_schema() -> None:
    registry = ToolRegistry()

    @registry.tool(parameters={"type": "object", "properties": {"q": {"type": "string"}}})
    async def search(ctx: RunContext, args: dict[str, Any]) -> list[str]:
        """Search the docs."""
        return []

    assert registry.select(["search"])["search"].spec() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the docs.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    with pytest.raises(ValueError, match="already registered"):
        registry.add(Tool("search", "again", {}, _noop))
    with pytest.raises(FatalError, match="registered: search"):
        registry.select(["other"])


async def test_side_effecting_tool_runs_once_per_key() -> None:
    runs: list[int] = []

    async def charge(ctx: RunContext, args: dict[str, Any]) -> dict[str, Any]:
        runs.append(args["cents"])
        return {"charged": args["cents"]}

    tool = Tool("charge", "Charge a card.", {}, charge, side_effect=True)
    ctx = FakeRunContext({})

    first = await invoke(tool, ctx, {"cents": 5}, effect_key="k")
    again = await invoke(tool, ctx.retry(), {"cents": 5}, effect_key="k")

    assert runs == [5]
    assert first == again and first.output == {"charged": 5} and not first.is_error


async def test_unexpected_exceptions_become_error_results_but_budget_errors_do_not() -> None:
    async def crash(ctx: RunContext, args: dict[str, Any]) -> None:
        raise KeyError("missing")

    async def over_budget(ctx: RunContext, args: dict[str, Any]) -> None:
        raise BudgetExceeded("max_tool_calls used up")

    result = await invoke(Tool("crash", "", {}, crash), FakeRunContext({}), {}, effect_key="k")
    assert result.is_error and result.output == "KeyError: 'missing'"
    with pytest.raises(BudgetExceeded):
        await invoke(Tool("b", "", {}, over_budget), FakeRunContext({}), {}, effect_key="k")


async def test_shell_tool() -> None:
    ctx = FakeRunContext({})

    ok = await invoke(SHELL, ctx, {"command": "echo out; echo err >&2"}, effect_key="a")
    failed = await invoke(SHELL, ctx, {"command": "exit 7"}, effect_key="b")
    slow = await invoke(SHELL, ctx, {"command": "sleep 30", "timeout_s": 0.2}, effect_key="c")
    bad = await invoke(SHELL, ctx, {"command": "true", "timeout_s": "soon"}, effect_key="d")

    assert ok.output == {"exit_code": 0, "output": "out\nerr\n"} and not ok.is_error
    assert failed.output == {"exit_code": 7, "output": ""} and failed.is_error
    assert slow.is_error and slow.output["timed_out"] is True
    assert bad.is_error and "timeout_s" in bad.output
    assert set(ctx.effects) == {"a", "b", "c", "d"}
