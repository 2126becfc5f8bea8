"""The OpenAI Agents SDK adapter's cost (``--only frameworks-openai-agents``): one SDK agent run
bare (``Runner.run_streamed``, its events drained, no runq) and through runq (a worker on this
process's loop, every model response and tool result recorded, tokens streamed to the event
log), on the same fake model server, in one run; the shapes, the arithmetic and the replay are
bench/framework_steps.py's. Both sides use Chat Completions with usage asked for and the SDK's
tracing off (runq turns it off when no OpenTelemetry exporter or export to OpenAI is set).
"""

from __future__ import annotations

import time
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIProvider,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
)

from app.agents.base import RetryableError
from app.agents.base import RunContext as RunqContext
from app.agents.openai_agents import OpenAIAgentsAgent
from app.settings import Settings
from bench import framework_steps
from bench.server import BenchServer


@function_tool(failure_error_function=None)  # a raise ends the attempt, as runq's retry needs
def step(ctx: RunContextWrapper[int], i: int) -> str:
    """One step of the run; it fails at the step its context names (the replay's first attempt)."""
    if i == ctx.context:
        raise RetryableError("the first attempt stops here")
    return f"done {i}"


bench_agent = Agent(name="bench", tools=[step])


class BenchAgent(OpenAIAgentsAgent):
    agent = bench_agent
    base_url = ""  # the bench's model server, set once it listens

    def __init__(self) -> None:
        super().__init__(Settings(openai_base_url=self.base_url, openai_api_key="bench", openai_model="bench"))

    def context(self, ctx: RunqContext) -> Any:
        return framework_steps.failing_step(ctx.input, ctx.attempt)


async def overhead_and_replay(
    server: BenchServer, *, rounds: int, tools: int, concurrency: int, replay_steps: int
) -> dict[str, Any]:
    async with framework_steps.running(
        server, "frameworks_openai_agents", agent="bench-openai-agents", target="bench.frameworks_openai_agents:BenchAgent",
        concurrency=concurrency,
    ) as (url, base_url, queue):
        BenchAgent.base_url = base_url

        async def bare(prompt: str) -> float:
            config = RunConfig(  # a provider per run, as the runq side makes one
                model=None, model_provider=OpenAIProvider(base_url=base_url, api_key="bench", use_responses=False),
                model_settings=ModelSettings(include_usage=True), tracing_disabled=True,
            )  # fmt: skip
            started = time.perf_counter()
            result = Runner.run_streamed(bench_agent, prompt, context=-1, run_config=config)
            async for _ in result.stream_events():
                pass
            return time.perf_counter() - started

        return await framework_steps.overhead_and_replay(
            bare, url, queue, "bench-openai-agents", rounds=rounds, tools=tools, concurrency=concurrency, replay_steps=replay_steps
        )
