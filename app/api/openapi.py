"""The OpenAPI document, exact where FastAPI's own falls short, so generated clients work.

FastAPI derives the document from the models; four things it cannot know: which agents this
deployment registered (``agent`` becomes an enum of them), how one Server-Sent Event looks on the
wire (each ``text/event-stream`` response documents its events), and that pydantic writes the
bounds of an integer field as floats (``maximum: 1000.0``), which some generators then type as
floats, and that a body sent as anything but JSON is refused (415). The document is built once,
on first request, like FastAPI's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.routing import Match
from starlette.types import Scope

from app.api.schemas import JSON_VALUE

SSE_MEDIA_TYPE = "text/event-stream"
LAST_EVENT_ID = r"^[0-9]{1,10}$"  # a seq, as the stream sent it in `id:`
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# One SSE message as a reader parses it (DESIGN §3): what each event of a stream looks like.
SSE_EVENT = {
    "type": "object",
    "title": "ServerSentEvent",
    "description": "One event: `id` is its seq, `event` its type, `data` its data object as JSON. "
    "Keep-alive comments carry no event (with `?keepalive=event` a keep-alive is an event `ping` "
    "with data `{}` and no `id`, which is not a run event).",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the event's seq"},
        "event": {"type": "string", "examples": ["run.queued", "message.delta", "run.completed"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}
# Every route that takes a body takes JSON (app/api/limits.py refuses anything else).
UNSUPPORTED_MEDIA_TYPE = {
    "description": "Unsupported Media Type: the body is not sent as application/json",
    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


def install(app: FastAPI, agents: Iterable[str]) -> None:
    """Serve :func:`exact` of the app's document at ``/openapi.json``."""
    names = sorted(agents)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            app.openapi_schema = exact(document, names)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def allowed_methods(app: FastAPI, scope: Scope) -> str:
    """The ``Allow`` header of a ``405``: every method some route of this path takes, as the
    document lists them. (Starlette's own names only the first route that matched the path, so
    ``OPTIONS /runs`` said ``Allow: POST`` although ``GET /runs`` exists.)"""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods - {"HEAD"}))


def exact(document: dict[str, Any], agents: list[str]) -> dict[str, Any]:
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("CreateRun", "CreateThreadRun", "ThreadTokenRequest", "ChatRequest"):
        agent = schemas.get(name, {}).get("properties", {}).get("agent")
        if agent is not None and agents:  # an optional agent: its string branch
            next((o for o in agent.get("anyOf", []) if o.get("type") == "string"), agent)["enum"] = agents
    schemas["ServerSentEvent"] = SSE_EVENT
    schemas["JsonValue"] = JSON_VALUE
    for path in document.get("paths", {}).values():
        for operation in path.values():
            for response in operation.get("responses", {}).values():
                media = response.get("content", {}).get(SSE_MEDIA_TYPE)
                if media is not None:
                    media["schema"] = {"$ref": "#/components/schemas/ServerSentEvent"}
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                _parameter(parameter)
            if "requestBody" in operation:
                operation["responses"].setdefault("415", UNSUPPORTED_MEDIA_TYPE)
    _integral_bounds(document)
    return document


def _parameter(parameter: dict[str, Any]) -> None:
    """A query or header parameter is absent or a string on the wire, never JSON ``null``:
    FastAPI's ``anyOf [..., {type: null}]`` for an optional one only invites a literal "null"."""
    schema = parameter.get("schema", {})
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1 and len(schema["anyOf"]) == 2:
        del schema["anyOf"]
        schema.update(options[0])
    if parameter.get("in") == "header" and parameter.get("name", "").lower() == "last-event-id":
        schema["pattern"] = LAST_EVENT_ID


def _integral_bounds(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in BOUNDS:
                if isinstance(node.get(key), float) and node[key].is_integer():
                    node[key] = int(node[key])
        for value in node.values():
            _integral_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _integral_bounds(value)
