"""The runq agent class a team's OpenAI Agents SDK agent is registered as (DESIGN §18)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import openai
from agents import (
    Agent,
    AgentsException,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    Model,
    MultiProvider,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResultStreaming,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)
from agents.run_error_handlers import RunErrorHandlers
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from app import tracing
from app.agents.base import AgentError, BudgetExceeded, FatalError, RetryableError, RunContext
from app.agents.chat_input import Seconds, SystemChatInput
from app.agents.inputs import parse_input
from app.agents.openai_agents.graph import durable_graph
from app.agents.openai_agents.model import ConfiguredProvider, DurableModel, DurableProvider
from app.agents.openai_agents.session import ThreadSession, to_items
from app.agents.openai_agents.spans import install_processor
from app.agents.openai_agents.steps import RunSteps
from app.guards.redact import redact
from app.settings import Settings, get_settings

_TRIPWIRES = (
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)


class OpenAIAgentsInput(SystemChatInput):
    """``{prompt}`` or ``{messages}`` (OpenAI chat format), ``system``, and how long an
    approval may wait; other fields are accepted."""

    approval_timeout_s: Seconds | None = None


class OpenAIAgentsAgent:
    """Runs ``agent`` durably and streaming: subclass, set ``agent``, register the subclass in
    ``RUNQ_AGENTS``.

    ``run_config(ctx)`` gives the run's ``RunConfig`` (its model, provider, settings, guardrails;
    runq adds its durable wrappers), ``context(ctx)`` the SDK's run context (``None`` by
    default), ``error_handlers`` the SDK's run error handlers. A model given by name, or none,
    is Chat Completions against ``RUNQ_OPENAI_BASE_URL`` / ``RUNQ_OPENAI_API_KEY`` /
    ``RUNQ_OPENAI_MODEL`` unless ``run_config`` names another provider than the SDK's default.
    """

    agent: ClassVar[Agent[Any]]
    error_handlers: ClassVar[RunErrorHandlers[Any] | None] = None
    input_schema: ClassVar[type[BaseModel]] = OpenAIAgentsInput

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()

    def run_config(self, ctx: RunContext) -> RunConfig | None:
        return None

    def context(self, ctx: RunContext) -> Any:
        return None

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        install_processor(export_to_openai=self.settings.openai_agents_trace_export)
        chat = parse_input(OpenAIAgentsInput, ctx.input)
        system = [{"role": "system", "content": chat.system}] if chat.system is not None else []
        team = self.run_config(ctx) or RunConfig()
        steps = RunSteps(ctx, tool_error_formatter=team.tool_error_formatter)
        session: ThreadSession | None = None
        if ctx.thread is not None:  # the history comes from the session, the system prompt first
            session = ThreadSession(ctx, [*system, *ctx.thread.messages], unstored=steps.unstored)
            system = []
        agent = durable_graph(self.agent, steps)
        options: dict[str, Any] = {
            "context": self.context(ctx),
            "run_config": self._durable_config(team, steps),
            "hooks": _Handoffs(steps),
            "session": session,
            "error_handlers": self.error_handlers,
        }
        if (max_turns := ctx.budget.get("max_turns")) is not None:  # runq's budget: no handler answers it
            options |= {"max_turns": int(max_turns), "error_handlers": _without_max_turns(self.error_handlers)}
        try:
            result = Runner.run_streamed(agent, to_items([*system, *chat.opening_messages()]), **options)
            await _finished(result)
            while result.interruptions:  # approvals: each decided (a step), then the run goes on
                state = result.to_state()
                for item in result.interruptions:
                    denied = await steps.decision(item)
                    if denied is None:
                        state.approve(item)
                    else:
                        state.reject(item, rejection_message=denied)
                result = Runner.run_streamed(agent, state, **options)
                await _finished(result)
        except Exception as exc:
            translated = _translated(exc)
            if translated is exc:
                raise
            raise translated from exc
        await steps.store_messages()  # the final answer's, with the ending
        output = result.final_output
        answer = {"text": output} if isinstance(output, str) else {"data": to_jsonable_python(output, fallback=str)}
        return answer | {"agent": result.last_agent.name}

    def _durable_config(self, team: RunConfig, steps: RunSteps) -> RunConfig:
        """The team's ``RunConfig`` with every model it can reach durable, runq's provider in
        place of the SDK's process-wide default, and the SDK's spans only where they go."""
        provider = team.model_provider
        if type(provider) is MultiProvider:  # the SDK's default: OPENAI_API_KEY of the process
            provider = ConfiguredProvider(self.settings)
        traced = tracing.enabled() or self.settings.openai_agents_trace_export
        return dataclasses.replace(
            team,
            model=DurableModel(team.model, steps) if isinstance(team.model, Model) else team.model,
            model_provider=DurableProvider(provider, steps),
            tool_error_formatter=steps.format_tool_error,
            tracing_disabled=team.tracing_disabled or not traced,
        )


class _Handoffs(RunHooks[Any]):
    """``agent.handoff`` events, from the SDK's own handoff hook."""

    def __init__(self, steps: RunSteps) -> None:
        self._steps = steps

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]) -> None:
        await self._steps.handoff(from_agent, to_agent)


async def _finished(result: RunResultStreaming) -> None:
    """Run the streamed run to its end (or its interruptions); the SDK's task is cancelled if
    this one is (a cancel of the run, a lost lease), which closes the model's stream."""
    try:
        async for _ in result.stream_events():
            pass  # runq's events come from the steps; the SDK's are not needed
    finally:
        if not result.is_complete:
            result.cancel()


def _without_max_turns(handlers: RunErrorHandlers[Any] | None) -> RunErrorHandlers[Any] | None:
    if handlers is None:
        return None
    return {kind: handler for kind, handler in handlers.items() if kind != "max_turns"}  # type: ignore[return-value]


def _translated(exc: Exception) -> Exception:
    """The SDK's and the model client's errors as the runtime's: what a retry can help, what
    it cannot, and runq's own errors that the SDK wrapped (a tool step's)."""
    if isinstance(exc, MaxTurnsExceeded):
        return BudgetExceeded(f"max_turns used up: {exc}")
    if isinstance(exc, AgentsException) and isinstance(exc.__cause__, AgentError):
        return exc.__cause__
    if isinstance(exc, _TRIPWIRES):
        return FatalError(f"{type(exc).__name__}: {exc}", code="guardrail_tripped")
    if isinstance(exc, openai.APIStatusError) and exc.status_code not in (408, 429) and exc.status_code < 500:
        return FatalError(redact(f"model request failed: {exc}"), code="model_error")
    if isinstance(exc, openai.APIError):  # connection, timeout, 429, 5xx after the client's retries
        return RetryableError(redact(f"model unavailable: {exc}"), code="model_unavailable")
    return exc
