"""An agent's ``input_schema``: checked when a run is created, so a bad input is a ``422`` to
the caller rather than a run that dies ``invalid_input`` on a worker later.

An agent class may set ``input_schema`` to a pydantic model or to a JSON Schema (a dict,
checked with the ``jsonschema`` library in the draft it declares, 2020-12 when it declares
none). Without one, any JSON object is accepted, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from jsonschema import exceptions as schema_errors
from jsonschema import validators
from pydantic import BaseModel, ValidationError

from app.agents.base import Agent, FatalError

MAX_ERRORS = 20  # a problem lists at most this many failing fields
M = TypeVar("M", bound=BaseModel)


class InvalidInput(Exception):
    """``input`` does not match the agent's ``input_schema``; ``errors`` lists the failing
    fields as ``{loc, msg}`` (``loc`` the path into ``input``)."""

    def __init__(self, agent: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"invalid input for agent {agent!r}: {_first(errors)}")
        self.errors = errors


def _first(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "input"
    return f"{where}: {first['msg']}"


def _pydantic_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()[:MAX_ERRORS]]


def parse_input(model: type[M], value: Mapping[str, Any]) -> M:
    """``value`` as an agent's input model, for the agent to read it typed. A mismatch is a fatal
    ``invalid_input``; only a direct call meets one, as the worker checks ``input_schema`` first."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise FatalError(f"invalid input: {_first(_pydantic_errors(exc))}", code="invalid_input") from None


@dataclass(frozen=True, slots=True)
class InputSchema:
    """An agent's declared schema, ready to check inputs against."""

    json_schema: dict[str, Any]  # what GET /agents shows
    errors: Callable[[Mapping[str, Any]], list[dict[str, Any]]]  # the failing fields, [] if valid


def _model_errors(model: type[BaseModel]) -> Callable[[Mapping[str, Any]], list[dict[str, Any]]]:
    def errors(value: Mapping[str, Any]) -> list[dict[str, Any]]:
        try:
            model.model_validate(value)
        except ValidationError as exc:
            return _pydantic_errors(exc)
        return []

    return errors


def _json_schema_errors(schema: dict[str, Any], owner: str) -> Callable[[Mapping[str, Any]], list[dict[str, Any]]]:
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        raise TypeError(f"{owner}.input_schema is not a valid JSON Schema: {exc.message}") from exc
    iter_errors = cls(schema).iter_errors

    def errors(value: Mapping[str, Any]) -> list[dict[str, Any]]:
        found = sorted(iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])[:MAX_ERRORS]
        return [{"loc": list(e.absolute_path), "msg": e.message} for e in found]

    return errors


@cache
def input_schema(agent_class: type[Agent]) -> InputSchema | None:
    """The agent's declared schema, or None; one that is not a schema raises ``TypeError``."""
    declared = getattr(agent_class, "input_schema", None)
    owner = agent_class.__qualname__
    if declared is None:
        return None
    if isinstance(declared, type) and issubclass(declared, BaseModel):
        return InputSchema(declared.model_json_schema(), _model_errors(declared))
    if isinstance(declared, Mapping):
        schema = dict(declared)
        return InputSchema(schema, _json_schema_errors(schema, owner))
    raise TypeError(f"{owner}.input_schema must be a pydantic model or a JSON Schema dict")


def check_input(name: str, agent_class: type[Agent], value: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidInput` if ``value`` does not match the agent's schema."""
    declared = input_schema(agent_class)
    if declared is not None and (errors := declared.errors(value)):
        raise InvalidInput(name, errors)

