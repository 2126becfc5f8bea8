"""The API app: ``uvicorn app.main:app``.

:func:`create_app` wires the process-wide objects (engine, queue, the LISTEN fan-out, the
presence refresher) into a lifespan, and is the one place where errors become RFC 9457
problems.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import heap, tracing
from app.agents.inputs import InvalidInput
from app.agents.registry import UnknownAgent, start_agents
from app.api import (
    admin,
    admin_tenants,
    agents,
    docs,
    health,
    openapi,
    runs,
    schedules,
    threads,
    ui,
    webhooks,
)
from app.api.cors import install_cors
from app.api.deps import Runtime
from app.api.limits import BodySizeLimit, JsonBodies
from app.api.presence import Presence
from app.api.problems import ApiProblem, problem_response
from app.api.protocols import ag_ui, ai_sdk, langgraph
from app.api.protocols.chat_body import LongChats
from app.api.quotas import limit_response
from app.api.stream import event_hub
from app.db.engine import engine_for
from app.db.errors import CONNECTION_ERRORS, database_down
from app.db.url import asyncpg_dsn
from app.errors import (
    ChatIdTaken,
    DatabaseUnavailable,
    DeliveryNotFound,
    IdempotencyConflict,
    LimitExceeded,
    NotRedeliverable,
    NotRequeueable,
    NotWaiting,
    RunFinished,
    RunNotFound,
    ScheduleNotFound,
    ThreadBusy,
    ThreadNotFound,
)
from app.logs import configure_logging
from app.queue import Queue
from app.settings import Settings, get_settings

log = logging.getLogger(__name__)

RETRY_AFTER_S = "2"
PRESENCE_REFRESH_MAX_S = 5.0

# Domain errors as problems: (status, code, detail).
DOMAIN_PROBLEMS: dict[type[Exception], tuple[int, str, str]] = {
    RunNotFound: (404, "not_found", "no such run"),
    RunFinished: (409, "run_finished", "the run has already finished"),
    NotWaiting: (409, "not_waiting", "the run is not waiting, or the waitpoint named is not its open one"),
    IdempotencyConflict: (
        409,
        "idempotency_conflict",
        "this Idempotency-Key was used before with a different request body",
    ),
    NotRequeueable: (409, "not_requeueable", "only dead or cancelled runs can be requeued"),
    DeliveryNotFound: (404, "not_found", "no such webhook delivery"),
    NotRedeliverable: (409, "not_redeliverable", "the delivery is still pending; it will be sent"),
    ScheduleNotFound: (404, "not_found", "no such schedule"),
    ThreadNotFound: (404, "not_found", "no such thread"),
    ThreadBusy: (409, "thread_busy", "a run of this thread is in flight"),
    ChatIdTaken: (409, "chat_id_conflict", "another thread of this tenant has this chat_id"),
}
HTTP_CODES = {
    400: "malformed_json",  # FastAPI's only own 400: a body it could not parse
    404: "not_found",
    405: "method_not_allowed",
}
def create_app(settings: Settings | None = None, *, sse_ping_s: float = 10.0) -> FastAPI:
    """The API; ``sse_ping_s`` is the keep-alive comment interval (at most 15 s, see
    docs/contract.md; short in tests)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not logging.getLogger().handlers:  # a bare `uvicorn app.main:app`; never override a host's
            configure_logging(settings.log_format, settings.log_level)
        start_agents(settings)
        url = settings.database_url
        if not url:
            raise RuntimeError("RUNQ_DATABASE_URL is not set; `runq api` or `runq dev` provide one")
        engine = engine_for(url, settings, role="api")
        queue = Queue.from_settings(engine, settings)
        hub = event_hub(asyncpg_dsn(settings.listen_database_url or url), queue)
        presence = Presence(queue, refresh_s=min(PRESENCE_REFRESH_MAX_S, settings.presence_ttl_s / 3))
        app.state.runtime = Runtime(settings, engine, queue, hub, presence, sse_ping_s)
        await hub.start()
        await presence.start()
        heap.settle()
        try:
            yield
        finally:
            await presence.stop()
            await hub.stop()
            await engine.dispose()

    # Swagger UI and ReDoc from files shipped in the fastapi-offline wheel, not from a CDN:
    # /docs must work on a laptop without internet and behind an air gap.
    app = FastAPIOffline(
        title="runq",
        summary="A control plane for long-running AI agent runs",
        version="0.1.0",
        lifespan=lifespan,
        redoc_url=None,  # app/api/docs.py serves it, with a policy against ReDoc's CDN logo
    )
    app.add_middleware(JsonBodies)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    # Outside the size limit: a long chat's body reaches the limit as its last message alone.
    app.add_middleware(LongChats, max_bytes=settings.chat_max_body_bytes, max_item_bytes=settings.max_body_bytes)
    install_cors(app, settings)
    if tracing.configure("runq-api"):  # only when OTEL_* asks for traces (docs/usage.md)
        tracing.instrument_app(app)
    app.include_router(runs.router)
    app.include_router(admin.router)
    app.include_router(admin_tenants.router)
    app.include_router(webhooks.router)
    app.include_router(webhooks.admin_router)
    app.include_router(schedules.router)
    app.include_router(threads.router)
    app.include_router(ai_sdk.router)
    app.include_router(ag_ui.router)
    app.include_router(langgraph.router)
    app.include_router(agents.router)
    app.include_router(schedules.admin_router)
    app.include_router(health.router)
    app.include_router(ui.router)
    app.include_router(docs.router)
    _add_problem_handlers(app)
    openapi.install(app, settings.agent_registry)
    return app


Handler = Callable[[Request, Any], Awaitable[JSONResponse]]


def _add_problem_handlers(app: FastAPI) -> None:
    def on(*types: type[Exception]) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            for exc_type in types:
                app.add_exception_handler(exc_type, handler)
            return handler

        return register

    @on(ApiProblem)
    async def api_problem(request: Request, exc: ApiProblem) -> JSONResponse:
        return problem_response(
            exc.status, exc.code, exc.detail, instance=request.url.path, headers=exc.headers, **exc.extra
        )

    @on(UnknownAgent)
    async def unknown_agent(request: Request, exc: UnknownAgent) -> JSONResponse:
        return problem_response(422, "unknown_agent", str(exc), instance=request.url.path, agents=exc.known)

    @on(InvalidInput)
    async def invalid_input(request: Request, exc: InvalidInput) -> JSONResponse:
        # loc as in validation_error, from the body: the failing field inside `input`
        errors = [{"loc": ["body", "input", *e["loc"]], "msg": e["msg"]} for e in exc.errors]
        return problem_response(422, "invalid_input", str(exc), instance=request.url.path, errors=errors)

    @on(LimitExceeded)
    async def limit_problem(request: Request, exc: LimitExceeded) -> JSONResponse:
        return limit_response(exc, instance=request.url.path)

    @on(*DOMAIN_PROBLEMS)
    async def domain_problem(request: Request, exc: Exception) -> JSONResponse:
        status, code, detail = DOMAIN_PROBLEMS[type(exc)]
        return problem_response(status, code, detail, instance=request.url.path)

    @on(RequestValidationError)
    async def validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return problem_response(
                400, "malformed_json", "the request body is not valid JSON", instance=request.url.path
            )
        return problem_response(
            422,
            "validation_error",
            "the request is invalid; see errors",
            instance=request.url.path,
            errors=[
                {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                for e in errors
            ],
        )

    @on(StarletteHTTPException)
    async def http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        code = HTTP_CODES.get(status, HTTPStatus(status).phrase.lower().replace(" ", "_"))
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
        headers = dict(exc.headers or {})
        if status == 405:
            headers["Allow"] = openapi.allowed_methods(app, request.scope)
        return problem_response(status, code, detail, instance=request.url.path, headers=headers)

    @on(DatabaseUnavailable, *CONNECTION_ERRORS)  # what escapes a statement outside the queue too
    async def database_problem(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable during %s %s: %r", request.method, request.url.path, exc)
        return problem_response(
            503,
            "database_unavailable",
            "the database is unavailable; retry later",
            instance=request.url.path,
            headers={"Retry-After": RETRY_AFTER_S},
        )

    @on(sa_exc.DBAPIError)
    async def driver_problem(request: Request, exc: sa_exc.DBAPIError) -> JSONResponse:
        # A restarting server surfaces as a plain DBAPIError (by SQLSTATE), not a subclass.
        if database_down(exc):
            return await database_problem(request, exc)
        return await internal_problem(request, exc)

    @on(Exception)
    async def internal_problem(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(500, "internal_error", "an unexpected error occurred", instance=request.url.path)


app = create_app()
