"""Bring a PydanticAI agent (DESIGN §14.1; extra ``runq[pydantic-ai]``).

``agent`` (the class a team registers), ``chat`` (thread messages in and out), ``durability``
(runq as a pydantic-ai durable-execution engine, its steps recorded by
:mod:`app.agents.steps`). Nothing outside this package imports it: runq without the extra never loads pydantic-ai.
"""

from app.agents.pydantic_ai.agent import PydanticAIAgent, PydanticAIInput
from app.agents.steps import ReplayMismatch

__all__ = ["PydanticAIAgent", "PydanticAIInput", "ReplayMismatch"]
