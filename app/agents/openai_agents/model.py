"""Every model a run uses, wrapped so that each response is a recorded step.

The SDK picks a run's model as ``RunConfig.model``, else the agent's own ``Model`` instance,
else its provider's model for the agent's model name: an instance skips the provider, so each
agent of the handoff graph gets its instance wrapped (app/agents/openai_agents/graph.py) and
the provider is wrapped too. A wrapped model is always asked to stream; it hands the SDK the
whole response at once, live or replayed (:meth:`RunSteps.response`), so the SDK's loop sees
no difference between the two.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import (
    Handoff,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    OpenAIProvider,
    UserError,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
from agents.tool import Tool
from openai.types.responses import ResponseCompletedEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic_core import to_jsonable_python

from app.agents.base import FatalError
from app.agents.openai import OPENAI_HOST
from app.agents.openai_agents.steps import RunSteps, StreamFailed, inside_tool_step
from app.settings import Settings


class DurableModel(Model):
    """``model`` with each response a step of the run: recorded live, replayed on a retry."""

    def __init__(self, model: Model, steps: RunSteps, *, ask_usage: bool = False) -> None:
        self.model = model
        self._steps = steps
        self._ask_usage = ask_usage  # include_usage, which the SDK asks of OpenAI only

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if inside_tool_step():  # an agent used as a tool (Runner.run), inside the tool's step
            return await self.model.get_response(*args, **kwargs)
        raise UserError("runq runs OpenAI Agents SDK agents streamed (Runner.run_streamed)")

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        if self._ask_usage and model_settings.include_usage is None:
            model_settings = dataclasses.replace(model_settings, include_usage=True)

        def stream() -> AsyncIterator[TResponseStreamEvent]:
            return self.model.stream_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
            )  # fmt: skip

        if inside_tool_step():  # an agent used as a tool streams inside the tool's step
            async for event in stream():
                yield event
            return
        fingerprint = request_fingerprint(system_instructions, input, tools, handoffs, output_schema)
        try:
            response = await self._steps.response(fingerprint, stream)
        except StreamFailed as failed:
            if failed.event is not None:
                yield failed.event
            return
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self.model.get_retry_advice(request)

    async def close(self) -> None:
        await self.model.close()


class DurableProvider(ModelProvider):
    """``provider``'s models, each a :class:`DurableModel` of the run."""

    def __init__(self, provider: ModelProvider, steps: RunSteps) -> None:
        self._provider = provider
        self._steps = steps

    def get_model(self, model_name: str | None) -> Model:
        model = self._provider.get_model(model_name)
        return DurableModel(model, self._steps, ask_usage=isinstance(self._provider, ConfiguredProvider))

    async def aclose(self) -> None:
        await self._provider.aclose()


class ConfiguredProvider(OpenAIProvider):
    """Chat Completions against ``RUNQ_OPENAI_BASE_URL`` / ``RUNQ_OPENAI_API_KEY``, the model
    ``RUNQ_OPENAI_MODEL`` unless the agent names one: built per run, never the SDK's
    process-wide default client."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(api_key=settings.openai_api_key or "none", base_url=settings.openai_base_url, use_responses=False)
        self._settings = settings

    def get_model(self, model_name: str | None) -> Model:
        if not self._settings.openai_api_key and OPENAI_HOST in self._settings.openai_base_url:
            raise FatalError("RUNQ_OPENAI_API_KEY is not set", code="model_not_configured")
        return super().get_model(model_name or self._settings.openai_model)


def request_fingerprint(
    instructions: str | None,
    input: str | list[TResponseInputItem],
    tools: Sequence[Tool],
    handoffs: Sequence[Handoff],
    output_schema: AgentOutputSchemaBase | None,
) -> str:
    """What a model request asks, as a digest to compare a replayed request with the recorded
    one (never a key: records are found by position). Of the input, only what follows the last
    thing the model said (tool results, new prompts) and its length: what came before was
    compared at the earlier steps, and hashing it all again would make a long replay quadratic."""
    items = to_jsonable_python([input] if isinstance(input, str) else input, fallback=str)
    last = max((i for i, item in enumerate(items) if _said_by_model(item)), default=-1)
    request = {
        "instructions": instructions,
        "length": len(items),
        "new": items[last + 1 :],
        "tools": [[tool.name, getattr(tool, "params_json_schema", None)] for tool in tools],
        "handoffs": [handoff.tool_name for handoff in handoffs],
        "output": None if output_schema is None or output_schema.is_plain_text() else output_schema.json_schema(),
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()


def _said_by_model(item: Any) -> bool:
    return isinstance(item, dict) and (item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning"))
