"""Request and response bodies (docs/contract.md, section 2) as pydantic models."""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, Self, TypeVar, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    create_model,
)
from pydantic.fields import FieldInfo

from app.domain import Event, Run, Usage

D = TypeVar("D")
MAX_INPUT_DEPTH = 64
FiniteSeconds = Annotated[float, Field(allow_inf_nan=False)]


def _integral(value: Any) -> Any:
    # JSON has one number type: 5.0 is the integer 5 to JSON Schema (and to every generated
    # client that sends it so), while strict pydantic refuses any float for an int.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# After the field's bounds in ``Annotated[int, Field(...), Integral]`` (placed before them,
# pydantic would write the bounds into the document as unknown "ge"/"le" keys): ``5`` and
# ``5.0`` are accepted, ``5.5``, ``"5"`` and ``true`` are not.
Integral = BeforeValidator(_integral)


def _check_json(value: Any, depth: int = 0) -> None:
    """Refuse what PostgreSQL's jsonb cannot store (NUL characters, lone surrogates such as a
    JSON ``"\\ud800"``, NaN, infinities) and absurd nesting, so that no request body can reach
    the database and fail there as a 500."""
    if depth > MAX_INPUT_DEPTH:
        raise ValueError(f"nested deeper than {MAX_INPUT_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("strings must not contain NUL (\\u0000)")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError("strings must be valid Unicode (no lone surrogates)") from exc
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json(key, depth + 1)
            _check_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)


# jsonb cannot store NUL: the document says so of every string in a stored JSON value (a
# component of its own, app/api/openapi.py), so a body the schema allows is not refused for it.
NO_NUL = r"^[^\x00]*$"
JSON_VALUE_REF = {"$ref": "#/components/schemas/JsonValue"}
JSON_VALUE = {
    "title": "JsonValue",
    "description": "Any JSON value PostgreSQL's jsonb can store: no string or key holds NUL (\\u0000).",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": JSON_VALUE_REF},
        {"type": "object", "additionalProperties": JSON_VALUE_REF, "propertyNames": {"pattern": NO_NUL}},
    ],
}


def _storable(value: Any) -> Any:
    _check_json(value)
    return value


# The last step of every field a request stores as jsonb: ``_check_json``'s refusal, a 422
# naming the field, instead of a 500 from PostgreSQL.
Storable = AfterValidator(_storable)
# Text a request names that PostgreSQL stores or looks it up by (an AG-UI run id).
StoredText = Annotated[str, Field(pattern=NO_NUL), Storable]
StoredValue = Annotated[
    Any, WithJsonSchema({"allOf": [JSON_VALUE_REF]}), Storable  # a bare $ref would lose its description
]
StoredObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "additionalProperties": JSON_VALUE_REF, "propertyNames": {"pattern": NO_NUL}}),
    Storable,
]


class Budget(BaseModel):
    """Limits the worker's runtime enforces; all optional."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_turns: Annotated[int, Field(gt=0, le=1_000_000), Integral] | None = None
    max_tool_calls: Annotated[int, Field(gt=0, le=1_000_000), Integral] | None = None
    deadline_s: Annotated[FiniteSeconds, Field(gt=0, le=365 * 86400)] | None = None
    max_tokens: Annotated[int, Field(gt=0, le=10**12), Integral] | None = Field(
        default=None, description="input plus output tokens over all attempts; past it the run ends dead (budget_exceeded)"
    )


WebhookEvent = Literal["run.completed", "run.failed", "run.cancelled", "run.waiting"]
DEFAULT_WEBHOOK_EVENTS: list[WebhookEvent] = ["run.completed", "run.failed", "run.cancelled"]


class Webhook(BaseModel):
    """Where to announce the run's events (docs/webhooks.md); the URL is checked by the route."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: Annotated[str, Field(min_length=1, examples=["https://example.com/hooks/runq"])]
    events: Annotated[list[WebhookEvent], Field(min_length=1, max_length=4)] = Field(
        default_factory=lambda: list(DEFAULT_WEBHOOK_EVENTS)
    )


class CreateRun(BaseModel):
    """``POST /runs``; strict, so ``"5"`` or ``true`` is not a number."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agent: Annotated[str, Field(min_length=1, max_length=200, examples=["demo"])]
    input: Annotated[dict[str, Any], Storable] = Field(
        default_factory=dict, examples=[{"prompt": "hello", "steps": 3}]
    )
    budget: Budget | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000), Integral] = 0
    max_attempts: Annotated[int, Field(ge=1, le=100), Integral] | None = Field(
        default=None, description="default RUNQ_MAX_ATTEMPTS"
    )
    delay_s: Annotated[FiniteSeconds, Field(ge=0, le=365 * 86400)] = 0.0
    on_disconnect: Literal["continue", "cancel"] = "continue"
    disconnect_grace_s: Annotated[FiniteSeconds, Field(ge=0, le=7 * 86400)] = 30.0
    webhook: Webhook | None = None


class CancelRun(BaseModel):
    """``POST /runs/{id}/cancel``: an optional note for the ``run.cancel_requested`` event."""

    model_config = ConfigDict(extra="forbid", strict=True)

    note: Annotated[str, Field(max_length=2000), Storable] | None = None


def fields_of(model: type[BaseModel], source: object, **shaped: Any) -> dict[str, Any]:
    """The values of a response model's fields, read by name from the domain object it shows,
    except those the API shows in a form of its own (``shaped``): a model's ``of`` names only
    what it changes, not every field again."""
    return {name: shaped[name] if name in shaped else getattr(source, name) for name in model.model_fields}


class ResponseModel(BaseModel, Generic[D]):
    """A response model of the domain dataclass ``D`` (see :func:`response_model`)."""

    @classmethod
    def of(cls, source: D) -> Self:
        """The model of ``source``, its fields read by name; a model that shows one in a form of
        its own overrides this."""
        return cls(**fields_of(cls, source))


M = TypeVar("M", bound=ResponseModel[Any])


def response_model(domain: type, *, hide: Collection[str] = (), **shown: Any) -> Callable[[type[M]], type[M]]:
    """Decorates a :class:`ResponseModel` subclass, which gives the name, docstring and ``of``:
    the model it returns has ``domain``'s fields, in their order and with their types and
    defaults, so that a field is written once. Not those in ``hide``; those in ``shown`` are
    shown otherwise, as a type, a ``Field(...)`` (the domain's type, described) or
    ``(type, default)``."""
    hints = get_type_hints(domain)
    if unknown := (set(hide) | set(shown)) - set(hints):
        raise TypeError(f"{domain.__name__} has no fields {sorted(unknown)}")

    def definition(field: dataclasses.Field[Any]) -> Any:
        default = ... if field.default is dataclasses.MISSING else field.default
        override = shown.get(field.name, hints[field.name])
        if isinstance(override, FieldInfo):
            return Annotated[hints[field.name], override], default
        return override if isinstance(override, tuple) else (override, default)

    def build(base: type[M]) -> type[M]:
        definitions = {f.name: definition(f) for f in dataclasses.fields(domain) if f.name not in hide}
        return create_model(base.__name__, __base__=base, __module__=base.__module__, __doc__=base.__doc__, **definitions)

    return build


class UsageOut(BaseModel):
    """What the run consumed over all its attempts (docs/usage.md)."""

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    @classmethod
    def of(cls, usage: Usage) -> UsageOut:
        return cls(**usage.as_dict())


class Waitpoint(BaseModel):
    """What a waiting run waits for."""

    waitpoint_id: uuid.UUID
    name: str
    payload: Any
    expires_at: datetime | None


@response_model(
    Run,
    hide=("locked_by", "locked_until", "traceparent", "wait_count"),
    id=str,
    on_disconnect=Literal["continue", "cancel"],
    schedule_id=Field(description="the schedule that created the run"),
    thread_id=Field(description="the thread the run belongs to, if any"),
    usage=(UsageOut, Field(default_factory=UsageOut)),
    waitpoint=(Waitpoint | None, Field(default=None, description="the open wait while `waiting` (docs/waits.md)")),
)
class RunOut(ResponseModel[Run]):
    """A run as tenants see it: never the worker's lease fields."""

    @classmethod
    def of(cls, run: Run) -> Self:
        """The run's fields this model (or a subclass, as the admin's) declares."""
        return cls(**fields_of(cls, run, id=str(run.id), usage=UsageOut.of(run.usage)))


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


@response_model(Event)
class EventOut(ResponseModel[Event]):
    pass


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int | None = Field(
        description="pass back as ?after= for the next page; null once this page reached the last stored event"
    )


TokenScope = Literal["read", "resume"]


def _read_only() -> list[TokenScope]:
    return ["read"]


class StreamTokenRequest(BaseModel):
    """``POST /runs/{id}/stream-token``: what the token may do (``resume``: docs/waits.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    scopes: Annotated[list[TokenScope], Field(min_length=1, max_length=2)] = Field(default_factory=_read_only)


class StreamToken(BaseModel):
    token: str
    expires_at: datetime
    scopes: list[TokenScope] = Field(default_factory=_read_only)


class ResumeRun(BaseModel):
    """``POST /runs/{id}/resume``: the value the run's open wait returns (docs/waits.md)."""

    model_config = ConfigDict(extra="forbid")

    waitpoint_id: uuid.UUID | None = Field(default=None, description="must name the open waitpoint, if given")
    value: StoredValue = Field(description="any JSON value; `ctx.wait_for` returns it", examples=[{"approved": True}])


class Health(BaseModel):
    status: Literal["ok"] = "ok"
