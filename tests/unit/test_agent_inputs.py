"""``input_schema``: a pydantic model or a JSON Schema, checked before a run is stored."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app.agents.chat_input import LangGraphInput
from app.agents.demo import DemoAgent
from app.agents.inputs import InvalidInput, check_input, input_schema
from app.agents.openai import OpenAIAgent
from app.agents.registry import UnknownAgent, checked_agent
from app.settings import BUILTIN_AGENTS


class Model(BaseModel):
    to: int


class PydanticAgent:
    input_schema = Model


class SchemaAgent:
    input_schema = {"type": "object", "required": ["to"], "properties": {"to": {"type": "integer"}}}


class FreeAgent:
    pass


def _errors(agent: type, value: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        check_input("a", agent, value)
    except InvalidInput as exc:
        return exc.errors
    return []


@pytest.mark.parametrize("agent", [PydanticAgent, SchemaAgent])
def test_both_kinds_name_the_failing_field(agent: type) -> None:
    assert _errors(agent, {"to": 3}) == []
    [error] = _errors(agent, {"to": "many"})
    assert error["loc"] == ["to"] and error["msg"]
    assert _errors(agent, {})  # required


def test_an_agent_without_a_schema_takes_any_object() -> None:
    assert input_schema(FreeAgent) is None
    assert _errors(FreeAgent, {"anything": [1, 2]}) == []


def test_the_schema_shown_is_the_declared_one() -> None:
    assert input_schema(SchemaAgent).json_schema == SchemaAgent.input_schema  # type: ignore[union-attr]
    assert input_schema(PydanticAgent).json_schema["properties"]["to"]["type"] == "integer"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "loc"),
    [
        ({"steps": "many"}, ["steps"]),
        ({"steps": -1}, ["steps"]),
        ({"wait_timeout_s": -5}, ["wait_timeout_s"]),
        ({"fatal": "perhaps"}, ["fatal"]),
    ],
)
def test_demo_refuses_what_it_would_die_of(value: dict[str, Any], loc: list[str]) -> None:
    assert [e["loc"] for e in _errors(DemoAgent, value)] == [loc]


def test_demo_keeps_accepting_what_it_accepted() -> None:
    assert _errors(DemoAgent, {}) == []
    assert _errors(DemoAgent, {"prompt": "hi", "steps": 2, "step_s": 0, "unknown": {"x": 1}}) == []


@pytest.mark.parametrize(
    ("value", "loc"),
    [
        ({}, []),
        ({"prompt": ""}, []),
        ({"messages": []}, ["messages"]),
        ({"prompt": "hi", "temperature": "hot"}, ["temperature"]),
        ({"prompt": "hi", "temperature": True}, ["temperature"]),
        ({"prompt": "hi", "tools": "shell"}, ["tools"]),
        ({"prompt": "hi", "approve_tools": "shell"}, ["approve_tools", "list[str]"]),
        ({"prompt": "hi", "approval_timeout_s": 0}, ["approval_timeout_s"]),
        ({"prompt": "hi", "model": ""}, ["model"]),
    ],
)
def test_openai_refuses_what_it_would_die_of(value: dict[str, Any], loc: list[str]) -> None:
    errors = _errors(OpenAIAgent, value)
    assert errors and errors[0]["loc"] == loc


def test_openai_keeps_accepting_what_it_accepted() -> None:
    assert _errors(OpenAIAgent, {"prompt": "hi", "temperature": 0, "approve_tools": "*", "extra": 1}) == []
    assert _errors(OpenAIAgent, {"messages": [{"role": "user", "content": "hi"}], "tools": ["shell"]}) == []


def test_checked_agent_names_the_unknown_and_the_invalid() -> None:
    assert checked_agent(BUILTIN_AGENTS, "demo", {"steps": 1}) is DemoAgent
    with pytest.raises(UnknownAgent) as unknown:
        checked_agent(BUILTIN_AGENTS, "nope", {})
    assert unknown.value.known == ["demo", "openai"]
    with pytest.raises(InvalidInput, match=r"invalid input for agent 'demo': steps: "):
        checked_agent(BUILTIN_AGENTS, "demo", {"steps": "many"})


class GraphAgent:
    input_schema = LangGraphInput  # what LangGraphAgent declares (the class needs the extra)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ({"prompt": "hi"}, True),
        ({"messages": [{"role": "user", "content": "hi"}]}, True),
        ({"state": {"count": 1}}, True),
        ({"prompt": "hi", "interrupt_timeout_s": 60, "other": 1}, True),
        ({}, False),
        ({"state": "not an object"}, False),
        ({"prompt": "hi", "interrupt_timeout_s": -1}, False),
    ],
)
def test_langgraph_input(value: dict[str, Any], valid: bool) -> None:
    assert (_errors(GraphAgent, value) == []) is valid


def test_a_langgraph_input_without_an_opening_names_every_accepted_shape() -> None:
    from app.agents.langgraph import LangGraphAgent

    class Graph(LangGraphAgent):
        pass

    with pytest.raises(InvalidInput) as refused:
        check_input("graph", Graph, {"steps": 2})
    assert "`prompt` (a non-empty string), `messages` or `state`" in str(refused.value)
