"""The runq agent class a team's PydanticAI agent is registered as (DESIGN §14.1)."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any, ClassVar

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelAPIError, ModelRequestRejectedError
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_core import to_jsonable_python

from app.agents.base import FatalError, RetryableError, RunContext
from app.agents.chat_input import ChatInput
from app.agents.openai import OPENAI_HOST, opening
from app.agents.pydantic_ai.chat import to_model_messages
from app.agents.pydantic_ai.durability import RunqDurability
from app.guards.redact import redact
from app.settings import Settings, get_settings


class PydanticAIInput(ChatInput):
    """``{prompt}`` or ``{messages}`` (OpenAI chat format), and ``system``, as the ``openai``
    agent's opening reads them; other fields are accepted."""

    system: str | None = None


class PydanticAIAgent:
    """Runs ``agent`` durably: subclass, set ``agent``, register the subclass in ``RUNQ_AGENTS``.

    ``deps(ctx)`` gives the run's dependencies (``None`` by default); ``model(ctx)`` a model for
    this run instead of the agent's own. An agent without a model uses ``RUNQ_OPENAI_BASE_URL``,
    ``RUNQ_OPENAI_API_KEY`` and ``RUNQ_OPENAI_MODEL`` (any OpenAI-compatible server).
    """

    agent: ClassVar[Agent[Any, Any]]
    input_schema: ClassVar[type[BaseModel]] = PydanticAIInput

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()

    def deps(self, ctx: RunContext) -> Any:
        return None

    def model(self, ctx: RunContext) -> Model | None:
        return None

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        conversation, fresh = opening(ctx.input, ctx.thread.messages if ctx.thread else ())
        agent = self._agent_for(ctx)
        durability = RunqDurability(ctx, name=agent.name or type(self).__name__, opening=fresh)
        try:
            result = await agent.run(
                message_history=to_model_messages(conversation), deps=self.deps(ctx), capabilities=[durability]
            )
        except ModelRequestRejectedError as exc:  # the request's fault: retrying cannot help
            raise FatalError(redact(f"model request failed: {exc}"), code="model_error") from exc
        except ModelAPIError as exc:  # connection, 429, 5xx after the client's own retries
            raise RetryableError(redact(f"model unavailable: {exc}"), code="model_unavailable") from exc
        if isinstance(result.output, str):
            output: dict[str, Any] = {"text": result.output}
            answer = result.output
        else:
            output = {"data": to_jsonable_python(result.output)}
            answer = json.dumps(output["data"])
        if ctx.thread is not None:  # stored with the ending, so a replayed run adds it once
            await ctx.add_messages([{"role": "assistant", "content": answer}])
        return output

    def _agent_for(self, ctx: RunContext) -> Agent[Any, Any]:
        """The agent, or a shallow copy of it that uses this run's model (the durable
        capability binds to the agent's own model; the team's agent object is left as it is)."""
        model = self.model(ctx)
        if model is None and self.agent.model is not None:
            return self.agent
        run_agent = copy.copy(self.agent)
        run_agent.model = model or self._configured_model()
        return run_agent

    def _configured_model(self) -> Model:
        settings = self.settings
        if not settings.openai_api_key and OPENAI_HOST in settings.openai_base_url:
            raise FatalError("RUNQ_OPENAI_API_KEY is not set", code="model_not_configured")
        return _openai_model(settings.openai_base_url, settings.openai_api_key or "none", settings.openai_model)


@functools.lru_cache(maxsize=4)
def _openai_model(base_url: str, api_key: str, name: str) -> Model:
    """One model (and so one HTTP client, its connections kept alive) per setting, shared by
    the worker's runs: a provider built per attempt cost about 20 ms of CPU for its client's
    TLS context alone, on every run."""
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url, api_key=api_key))
