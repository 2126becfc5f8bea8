"""OpenAI Agents SDK agents run by real worker processes through ``RUNQ_AGENTS`` (cwd is the repo
root), e.g. ``sdk-support=tests.fakes.agents_sdk_agents:Support``. Their models are the SDK's
Chat Completions against ``RUNQ_OPENAI_*`` (the tests point it at the fake server on 127.0.0.1),
except ``billing``'s, a ``Model`` instance of its own built from the same settings: the SDK
prefers an instance over any provider, so runq must wrap it where the agent holds it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, RunContextWrapper, function_tool
from openai import AsyncOpenAI
from pydantic import BaseModel

from app.agents.base import RunContext
from app.agents.openai_agents import OpenAIAgentsAgent
from app.settings import get_settings


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def record(path: str, note: str) -> str:
    """Append a note to a file: a side effect a retried run must not repeat."""
    with Path(path).open("a") as file:
        file.write(note + "\n")
    return f"recorded {note}"


@function_tool
async def hang(path: str) -> str:
    """Touch ``path`` and never return: a worker can be killed while this call runs."""
    await asyncio.to_thread(Path(path).touch)
    await asyncio.Event().wait()
    return "never"


@function_tool
def explode(reason: str) -> str:
    """Always raises: its result is an error the model reads."""
    raise RuntimeError(reason)


@function_tool(needs_approval=True)
def refund(path: str, order_id: str) -> str:
    """Refund an order (writes it to ``path``): only once a person approves."""
    with Path(path).open("a") as file:
        file.write(f"refunded {order_id}\n")
    return f"refunded {order_id}"


def own_model() -> OpenAIChatCompletionsModel:
    """A model instance of the agent's own (as a team builds one for another provider)."""
    settings = get_settings()
    client = AsyncOpenAI(base_url=settings.openai_base_url, api_key=settings.openai_api_key or "none")
    return OpenAIChatCompletionsModel("billing-model", openai_client=client)


billing = Agent(name="billing", instructions="You handle refunds.", model=own_model(), tools=[refund, record])
support = Agent(
    name="support", instructions="Help the customer.", tools=[add, record, hang, explode, refund], handoffs=[billing]
)


class Support(OpenAIAgentsAgent):
    agent = support


class Verdict(BaseModel):
    answer: str
    confidence: float


class Judge(OpenAIAgentsAgent):
    agent = Agent(name="judge", output_type=Verdict)


@function_tool(failure_error_function=None)
def flaky(ctx: RunContextWrapper[int]) -> str:
    """Fails the first attempt (no error handler: the exception ends the attempt)."""
    if ctx.context == 1:
        raise RuntimeError("the first attempt breaks here")
    return "fine"


class Drifting(OpenAIAgentsAgent):
    """Its instructions change from one attempt to the next: a replay must notice."""

    agent = Agent(name="drifting", instructions=lambda ctx, agent: f"You are on attempt {ctx.context}.", tools=[flaky])

    def context(self, ctx: RunContext) -> Any:
        return ctx.attempt

    def run_config(self, ctx: RunContext) -> RunConfig:
        return RunConfig(workflow_name="drifting")


AGENTS = ",".join(
    f"{name}=tests.fakes.agents_sdk_agents:{cls}"
    for name, cls in (("sdk-support", "Support"), ("sdk-judge", "Judge"), ("sdk-drifting", "Drifting"))
)
