"""Tools a model may call: a registry by name, the built-in ``shell`` tool, and how a call runs.

A tool is a name, a JSON-schema for its arguments, and ``async def fn(ctx, args)``. Its return
value (any JSON) is the result the model sees; raising :class:`ToolError` (or any other
exception) hands the model an ``is_error`` result instead of failing the run. A tool marked
``side_effect`` runs through the run's effect ledger, so a retried attempt replays the stored
result rather than doing the thing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app import tracing
from app.agents.base import AgentError, FatalError, RunContext
from app.errors import QueueError

ToolFn = Callable[[RunContext, dict[str, Any]], Awaitable[Any]]


class ToolError(Exception):
    """A tool failed in a way the model should see: it becomes an ``is_error`` result."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a call produced; a tool may return one to flag an error without raising."""

    output: Any
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: ToolFn
    side_effect: bool = False

    def spec(self) -> dict[str, Any]:
        """The tool as offered in a chat-completions request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class ToolRegistry:
    """Tools by name. Agents pick the ones a run enables with :meth:`select`."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        *,
        parameters: Mapping[str, Any],
        name: str | None = None,
        description: str | None = None,
        side_effect: bool = False,
    ) -> Callable[[ToolFn], ToolFn]:
        """Decorator: register ``async def fn(ctx, args)``; name and description default to
        the function's name and docstring."""

        def register(fn: ToolFn) -> ToolFn:
            self.add(
                Tool(
                    name=name or fn.__name__,
                    description=description or (fn.__doc__ or "").strip(),
                    parameters=parameters,
                    fn=fn,
                    side_effect=side_effect,
                )
            )
            return fn

        return register

    def select(self, names: Iterable[str]) -> dict[str, Tool]:
        """The tools a run enables; an unknown name is the caller's mistake, not transient."""
        chosen: dict[str, Tool] = {}
        for name in names:
            if name not in self._tools:
                known = ", ".join(sorted(self._tools)) or "none"
                raise FatalError(
                    f"unknown tool {name!r} (registered: {known})", code="invalid_input"
                )
            chosen[name] = self._tools[name]
        return chosen


async def invoke(
    tool: Tool, ctx: RunContext, args: dict[str, Any], *, effect_key: str, ledger: bool = False
) -> ToolResult:
    """Run one call. Failures become error results; a side-effecting tool (or any with
    ``ledger``: an approved call, docs/waits.md) runs at most once per ``effect_key`` (its error
    results are recorded too, so a retry shows the model the same)."""

    async def call() -> dict[str, Any]:
        try:
            result = await tool.fn(ctx, args)
        except (AgentError, QueueError):
            raise  # the run's budget, deadline or lease: not the model's business
        except ToolError as exc:
            return {"output": str(exc), "is_error": True}
        except Exception as exc:
            return {"output": f"{type(exc).__name__}: {exc}", "is_error": True}
        if isinstance(result, ToolResult):
            return {"output": result.output, "is_error": result.is_error}
        return {"output": result, "is_error": False}

    with tracing.span("runq.tool_call", attributes={"runq.tool.name": tool.name}) as span:
        record = await ctx.effect(effect_key, call) if tool.side_effect or ledger else await call()
        output, is_error = record["output"], bool(record["is_error"])
        span.set_attribute("runq.tool.is_error", is_error)
        if isinstance(output, dict) and isinstance(output.get("exit_code"), int):
            span.set_attribute("runq.tool.exit_code", output["exit_code"])  # the shell tool's
    return ToolResult(output=output, is_error=is_error)


async def _shell(ctx: RunContext, args: dict[str, Any]) -> ToolResult:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("`command` must be a non-empty string")
    timeout_s = args.get("timeout_s")
    if timeout_s is not None and (
        isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0
    ):
        raise ToolError("`timeout_s` must be a positive number of seconds")
    result = await ctx.shell(command, timeout_s=None if timeout_s is None else float(timeout_s))
    output: dict[str, Any] = {"exit_code": result.exit_code, "output": result.output}
    if result.timed_out:
        output["timed_out"] = True
    return ToolResult(output, is_error=result.timed_out or result.exit_code != 0)


SHELL = Tool(
    name="shell",
    description=(
        "Run a shell command on the worker and return its exit code and combined stdout/stderr. "
        "The command is killed when it runs past `timeout_s` or the run is cancelled."
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, run by /bin/sh."},
            "timeout_s": {
                "type": "number",
                "description": "Kill the command after this many seconds.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    fn=_shell,
    # A command may change the world; a retried attempt replays its result from the ledger.
    side_effect=True,
)

DEFAULT_TOOLS = ToolRegistry([SHELL])
