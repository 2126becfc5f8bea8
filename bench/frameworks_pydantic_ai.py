"""The PydanticAI adapter's cost (``--only frameworks-pydantic-ai``): one PydanticAI agent run
bare (``agent.run``, streaming, no runq) and through runq (a worker on this process's loop, every
step recorded), on the same fake model server, in one run; the shapes, the arithmetic and the
replay are bench/framework_steps.py's.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from app.agents.base import RetryableError
from app.agents.base import RunContext as RunqContext
from app.agents.pydantic_ai import PydanticAIAgent
from bench import framework_steps
from bench.server import BenchServer

bench_agent = Agent(name="bench", deps_type=int)


@bench_agent.tool
def step(ctx: RunContext[int], i: int) -> str:
    """One step of the run; it fails at the step its context names (the replay's first attempt)."""
    if i == ctx.deps:
        raise RetryableError("the first attempt stops here")
    return f"done {i}"


class BenchAgent(PydanticAIAgent):
    agent = bench_agent
    base_url = ""  # the bench's model server, set once it listens

    def deps(self, ctx: RunqContext) -> Any:
        return framework_steps.failing_step(ctx.input, ctx.attempt)

    def model(self, ctx: RunqContext) -> Model:
        return _model(self.base_url)


@functools.cache
def _model(base_url: str) -> Model:
    """One model per server, shared by both sides' runs, as a deployment builds it once (a new
    provider's HTTP client and TLS context cost about 18 ms of CPU: an attempt's, not a step's)."""
    return OpenAIChatModel("bench", provider=OpenAIProvider(base_url=base_url, api_key="bench"))


async def overhead_and_replay(
    server: BenchServer, *, rounds: int, tools: int, concurrency: int, replay_steps: int
) -> dict[str, Any]:
    async with framework_steps.running(
        server, "frameworks_pydantic_ai", agent="bench-pydantic-ai", target="bench.frameworks_pydantic_ai:BenchAgent",
        concurrency=concurrency,
    ) as (url, base_url, queue):
        BenchAgent.base_url = base_url

        async def bare(prompt: str) -> float:
            model = _model(base_url)

            async def drain(ctx: Any, events: Any) -> None:
                async for _ in events:  # streamed, as runq streams it
                    pass

            started = time.perf_counter()
            await bench_agent.run(prompt, model=model, deps=-1, event_stream_handler=drain)
            return time.perf_counter() - started

        return await framework_steps.overhead_and_replay(
            bare, url, queue, "bench-pydantic-ai", rounds=rounds, tools=tools, concurrency=concurrency, replay_steps=replay_steps
        )
