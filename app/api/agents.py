"""``GET /agents``: what a client may put in ``agent`` and what each agent takes as ``input``,
so a form or a generated client need not guess (the run routes refuse what the schema refuses)."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.agents.registry import RegisteredAgent, load_agents
from app.api.auth import Tenant
from app.api.deps import RuntimeDep
from app.api.problems import problems

router = APIRouter(tags=["agents"])


class AgentOut(BaseModel):
    name: str = Field(description="what `agent` of a run names")
    description: str | None = Field(default=None, description="the first paragraph of the agent class's docstring")
    input_schema: dict[str, Any] | None = Field(
        description="JSON Schema of the run's `input`, checked when a run is created (`422 invalid_input`); "
        "null when the agent takes any object"
    )

    @classmethod
    def of(cls, agent: RegisteredAgent) -> AgentOut:
        doc = agent.agent_class.__dict__.get("__doc__")  # its own, not a base class's
        summary = inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ").replace("``", "`") if doc else None
        schema = agent.schema.json_schema if agent.schema else None
        return cls(name=agent.name, description=summary, input_schema=schema)


class AgentList(BaseModel):
    items: list[AgentOut]


@router.get("/agents", response_model=AgentList, responses=problems(401, 503))
async def list_agents(principal: Tenant, runtime: RuntimeDep) -> AgentList:  # the key is what it needs
    """The agents this deployment runs, by name, with their input schemas."""
    agents = load_agents(runtime.settings.agent_registry)  # imported at start-up; cached
    return AgentList(items=[AgentOut.of(agents[name]) for name in sorted(agents)])
