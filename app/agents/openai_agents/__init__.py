"""Bring an OpenAI Agents SDK agent (DESIGN §18; extra ``runq[openai-agents]``).

``agent`` (the class a team registers), ``graph`` (the team's agents cloned with durable models
and tools), ``model`` (every model of a run wrapped, runq's configured provider), ``steps`` (each
model response, tool result, handoff and approval a recorded step, on :mod:`app.agents.steps`),
``session`` (a runq thread as the SDK's ``Session``), ``spans`` (the SDK's spans as runq's
OpenTelemetry spans). Nothing outside this package imports it: runq without the extra never
loads the SDK.
"""

from app.agents.openai_agents.agent import OpenAIAgentsAgent, OpenAIAgentsInput
from app.agents.steps import ReplayMismatch

__all__ = ["OpenAIAgentsAgent", "OpenAIAgentsInput", "ReplayMismatch"]
