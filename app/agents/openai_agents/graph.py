"""The team's agent graph, cloned for one run with every model and function tool durable.

The team's ``Agent`` objects are never changed: each agent reachable through handoffs is cloned
once (a cycle of handoffs stays a cycle), its own ``Model`` instance wrapped (the SDK prefers an
instance over any provider), its function tools' ``on_invoke_tool`` made a recorded step. A
``Handoff`` object's agent is known only when the handoff runs: its ``on_invoke_handoff`` hands
back the clone. Tools of other kinds (hosted tools answer inside the model's response, which is
recorded; MCP servers' tools are listed at run time) are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, Handoff, Model, RunContextWrapper
from agents.tool_context import ToolContext

from app.agents.openai_agents.model import DurableModel
from app.agents.openai_agents.steps import RunSteps


def durable_graph(agent: Agent[Any], steps: RunSteps) -> Agent[Any]:
    """``agent`` and every agent it hands off to, cloned around the run's steps."""
    clones: dict[int, Agent[Any]] = {}

    def clone(original: Agent[Any]) -> Agent[Any]:
        if id(original) in clones:
            return clones[id(original)]
        copy = original.clone()
        clones[id(original)] = copy  # before the handoffs: they may lead back here
        if isinstance(original.model, Model):
            copy.model = DurableModel(original.model, steps)
        copy.tools = [_durable_tool(tool, steps) if isinstance(tool, FunctionTool) else tool for tool in original.tools]
        copy.handoffs = [clone(h) if isinstance(h, Agent) else _durable_handoff(h, clone) for h in original.handoffs]
        return copy

    return clone(agent)


def _durable_tool(tool: FunctionTool, steps: RunSteps) -> FunctionTool:
    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        return await steps.tool_result(tool, context, arguments)

    return dataclasses.replace(tool, on_invoke_tool=invoke)


def _durable_handoff(handoff: Handoff[Any, Any], clone: Callable[[Agent[Any]], Agent[Any]]) -> Handoff[Any, Any]:
    invoke = handoff.on_invoke_handoff

    async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
        return clone(await invoke(context, arguments))

    return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)
