"""PydanticAI agents run by real worker processes through ``RUNQ_AGENTS`` (cwd is the repo
root), e.g. ``support=tests.fakes.pydantic_agents:Support``. None has a model of its own: they
use ``RUNQ_OPENAI_*``, pointed by the tests at the fake server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

from app.agents.base import RunContext as RunqContext
from app.agents.pydantic_ai import PydanticAIAgent

support = Agent(name="support", instructions="Help the customer.")


@support.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@support.tool_plain
def record(path: str, note: str) -> str:
    """Append a note to a file: a side effect a retried run must not repeat."""
    with Path(path).open("a") as file:
        file.write(note + "\n")
    return f"recorded {note}"


@support.tool_plain(requires_approval=True)
def refund(path: str, order_id: str) -> str:
    """Refund an order (writes it to ``path``): only once a person approves."""
    with Path(path).open("a") as file:
        file.write(f"refunded {order_id}\n")
    return f"refunded {order_id}"


class Support(PydanticAIAgent):
    agent = support


class Verdict(BaseModel):
    answer: str
    confidence: float


judge = Agent(name="judge", output_type=Verdict)


class Judge(PydanticAIAgent):
    agent = judge


drifting = Agent(name="drifting", deps_type=int)


@drifting.instructions
def _attempt_instructions(ctx: RunContext[int]) -> str:
    return f"You are on attempt {ctx.deps}."  # changes between attempts: a replay must notice


@drifting.tool
def flaky(ctx: RunContext[int]) -> str:
    """Fails on the first attempt, so the run is retried."""
    if ctx.deps == 1:
        raise RuntimeError("the first attempt breaks here")
    return "fine"


class Drifting(PydanticAIAgent):
    agent = drifting

    def deps(self, ctx: RunqContext) -> Any:
        return ctx.attempt


breaking = Agent(name="breaking", deps_type=int)


@breaking.tool
def lookup(ctx: RunContext[int], key: str) -> str:
    """Breaks on the first attempt (its run is retried), answers after."""
    if ctx.deps == 1:
        raise RuntimeError("the first attempt breaks here")
    return f"value of {key}"


class Breaking(PydanticAIAgent):
    agent = breaking

    def deps(self, ctx: RunqContext) -> Any:
        return ctx.attempt


AGENTS = ",".join(
    f"{name}=tests.fakes.pydantic_agents:{cls}"
    for name, cls in (("support", "Support"), ("judge", "Judge"), ("drifting", "Drifting"), ("breaking", "Breaking"))
)
