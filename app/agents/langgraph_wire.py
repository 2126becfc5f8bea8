"""What a ``/langgraph`` run (DESIGN §17) stores as its runq input, and how graph values are
written on LangGraph's wire. Plain pydantic: the API imports it without LangGraph installed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The stream modes asked for on the wire -> LangGraph's ``astream`` modes.
STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages-tuple": "messages",
    "messages": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


class ServerRunInput(BaseModel):
    """What a ``/langgraph`` run route stores as the run's input."""

    model_config = ConfigDict(extra="forbid")

    input: Any = None
    command: dict[str, Any] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] | None = None
    stream_mode: list[str] = Field(default_factory=lambda: ["values"])
    stream_subgraphs: bool = False
    interrupt_before: list[str] | Literal["*"] | None = None
    interrupt_after: list[str] | Literal["*"] | None = None
    durability: Literal["sync", "async", "exit"] | None = None  # None: the agent's (sync)
    # Where the run starts: a checkpoint of the thread (``checkpoint_id``, ``checkpoint_ns``),
    # not its latest (LangGraph's time travel); None: the latest.
    checkpoint: dict[str, Any] | None = None
    # What the /langgraph routes show of the run; the graph does not read them.
    assistant_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    multitask_strategy: str | None = None


def wire_json(value: Any) -> Any:
    """A value as LangGraph's server writes it: messages and models as their fields
    (``{"type": "ai", "content": ...}``), dataclasses (``Interrupt``) as theirs."""
    if isinstance(value, BaseModel):
        return wire_json(value.model_dump())
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: wire_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): wire_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [wire_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.loads(json.dumps(value, default=str))
