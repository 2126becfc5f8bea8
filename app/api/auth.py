"""Who is calling: bearer keys, the admin check, and the :class:`Caller` of the routes a browser
may use with a token instead of a key, as FastAPI dependencies."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.deps import Runtime, RuntimeDep
from app.api.keys import KEY_PREFIX, Principal, find_key
from app.api.params import parse_id
from app.api.problems import ApiProblem
from app.api.schemas import CreateRun
from app.api.tokens import (
    InvalidToken,
    MissingScope,
    ThreadGrant,
    TokenExpired,
    require_scope,
    token_kind,
    verify_thread_token,
    verify_token,
)
from app.domain import Run, Strategy, Thread
from app.errors import RunNotFound

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key (`Authorization: Bearer rq_…`), or on a thread's routes a thread token",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
TokenQuery = Annotated[
    str | None,
    Query(
        description="A thread token (`POST /threads/{id}/token`) or a stream token "
        "(`POST /runs/{id}/stream-token`), for a browser `EventSource`, which sends no headers",
    ),
]
# What a browser may not choose for its runs: what they cost and when, and where the tenant is told.
TOKEN_REFUSED_FIELDS = frozenset({"budget", "priority", "max_attempts", "delay_s", "webhook"})
RunBody = TypeVar("RunBody", bound=CreateRun)
# What each scope of a stream token (one run) allows; a thread token's scopes are its own.
STREAM_TOKEN_SCOPES = frozenset({"read", "resume"})


def _unauthorized(detail: str, *, error: str | None = None, code: str = "unauthorized") -> ApiProblem:
    challenge = f'Bearer error="{error}"' if error else "Bearer"
    return ApiProblem(401, code, detail, headers={"WWW-Authenticate": challenge})


def _token_problem(exc: InvalidToken | MissingScope) -> ApiProblem:
    if isinstance(exc, MissingScope):
        return ApiProblem(
            403, "insufficient_scope", str(exc), headers={"WWW-Authenticate": 'Bearer error="insufficient_scope"'}
        )
    if isinstance(exc, TokenExpired):
        return _unauthorized(f"invalid token: {exc}", error="invalid_token", code="token_expired")
    return _unauthorized(f"invalid token: {exc}", error="invalid_token")


async def authenticate(request: Request, runtime: RuntimeDep, credentials: Credentials) -> Principal:
    """The caller's tenant from ``Authorization: Bearer <key>``; 401 otherwise, saying what is
    wrong: no header, a key without ``Bearer``, a token where a key is needed, an unknown key."""
    if credentials is None:
        raise _unauthorized(_missing_key(request.headers.get("authorization")))
    principal = await find_key(runtime.engine, credentials.credentials)
    if principal is None:
        raise _unauthorized(_unknown_key(credentials.credentials, runtime), error="invalid_token")
    return principal


def _missing_key(header: str | None) -> str:
    if header is None or not header.strip():
        return "an API key is required: Authorization: Bearer <key>"
    if header.strip().startswith(KEY_PREFIX):
        return "the Authorization header holds a key without its scheme: send Authorization: Bearer rq_…"
    return "runq takes an API key as Authorization: Bearer <key>; this header names another scheme"


def _unknown_key(value: str, runtime: Runtime) -> str:
    kind = None if value.startswith(KEY_PREFIX) else token_kind(runtime.settings.secret_key or "", value)
    if kind == "thread":
        return (
            "this is a thread token, which opens only its own thread's routes (its chat, its runs and"
            " their events, cancel and resume); this route needs an API key"
        )
    if kind == "stream":
        return "this is a stream token, which opens only its run's events; this route needs an API key"
    return "the API key is unknown or revoked"


Tenant = Annotated[Principal, Depends(authenticate)]


async def require_admin(principal: Tenant) -> Principal:
    """Admin routes; a tenant key is known but not allowed (403, unlike another tenant's run)."""
    if not principal.is_admin:
        raise ApiProblem(403, "forbidden", "this route needs an admin key")
    return principal


Admin = Annotated[Principal, Depends(require_admin)]


def _same_id(value: str, expected: uuid.UUID) -> bool:
    try:
        return uuid.UUID(value) == expected
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Caller:
    """The caller of a route a browser may use: a tenant key, a thread token (``grant``: that
    thread and its runs only; anything else is 401, whether it exists or not), or a stream
    token already checked against the path's run. Routes ask it for what they act on, so the
    token's bounds are enforced in one place."""

    runtime: Runtime
    principal: Principal
    grant: ThreadGrant | None
    path: Mapping[str, str]

    @property
    def tenant_id(self) -> str:
        return self.principal.tenant_id

    def require(self, scope: str) -> None:
        """403 ``insufficient_scope`` unless a thread token allows ``scope`` too (a route that
        does more than its dependency's scope, e.g. a chat message that resumes a run)."""
        if self.grant is not None:
            try:
                require_scope(self.grant, scope)
            except MissingScope as exc:
                raise _token_problem(exc) from exc

    def strategy(self, name: str) -> Strategy:
        """The multitask strategy a new run of the thread asks for. One that ends the runs in
        flight (``interrupt``, ``rollback``) also needs a thread token's ``cancel`` scope: a
        token that may not stop a run may not end one by starting another."""
        strategy = Strategy(name)
        if strategy.ends_runs:
            self.require("cancel")
        return strategy

    def thread_id(self) -> uuid.UUID:
        """The route's thread: the token's, or the one the path names."""
        if self.grant is not None:
            return self.grant.thread_id
        return parse_id(self.path["thread_id"], "thread")

    async def thread(self) -> Thread:
        """The route's thread of the caller's tenant; 404 when there is none."""
        return await self.runtime.queue.get_thread(self.thread_id(), tenant_id=self.tenant_id)

    async def chat_thread(self, name: str, *, create: bool = False) -> Thread:
        """The thread a chat frontend names (``/ai-sdk``, ``/ag-ui``): the tenant's thread with
        that id or ``chat_id`` (created on first use when ``create``); for a token, its own
        thread only (401 for any other name)."""
        if self.grant is None:
            return await self.runtime.queue.named_thread(name, tenant_id=self.tenant_id, create=create)
        thread = await self.thread()
        if name != thread.chat_id and not _same_id(name, thread.id):
            raise self.outside()
        return thread

    async def found_run(self, run_id: uuid.UUID) -> Run:
        """A run the caller may see: the tenant's (404 otherwise), for a token a run of its
        thread (401 otherwise)."""
        try:
            run = await self.runtime.queue.get_run(run_id, tenant_id=self.tenant_id)
        except RunNotFound:
            if self.grant is not None:
                raise self.outside() from None
            raise
        if self.grant is not None and run.thread_id != self.grant.thread_id:
            raise self.outside()
        return run

    async def run(self) -> Run:
        """The run the path names, as :meth:`found_run`."""
        return await self.found_run(parse_id(self.path["run_id"], "run"))

    def run_body(self, body: RunBody) -> RunBody:
        """The body a run is created with. A thread token may not set
        :data:`TOKEN_REFUSED_FIELDS` (403 ``field_not_allowed``) nor name another agent than
        the one it binds (403 ``agent_not_allowed``); the input fields it binds replace the
        browser's own."""
        if self.grant is None:
            return body
        refused = sorted(TOKEN_REFUSED_FIELDS & body.model_fields_set)
        if refused:
            raise ApiProblem(
                403, "field_not_allowed", f"a thread token may not set {', '.join(refused)}", fields=refused
            )
        if self.grant.agent is not None and body.agent != self.grant.agent:
            raise ApiProblem(403, "agent_not_allowed", f"this token's runs use the agent {self.grant.agent!r}")
        if self.grant.input:
            return body.model_copy(update={"input": body.input | self.grant.input})
        return body

    def outside(self) -> ApiProblem:
        """The answer to a thread token used on something outside its thread."""
        return _unauthorized("the token is for another thread", error="invalid_token")


async def resolve_caller(
    scope: str, request: Request, runtime: Runtime, credentials: HTTPAuthorizationCredentials | None, token: str | None
) -> Caller:
    """The :class:`Caller` of credentials already read from the request (a protocol that sends
    its key in another header, e.g. LangGraph's ``x-api-key``, reads it and comes here)."""
    path = request.path_params
    value = credentials.credentials if credentials is not None else token
    if value is None or (credentials is not None and value.startswith(KEY_PREFIX)):
        return Caller(runtime, await authenticate(request, runtime, credentials), None, path)
    secret = runtime.settings.secret_key or ""
    try:
        try:
            grant = verify_thread_token(secret, value)
        except InvalidToken:
            # Not a thread token: a stream token, valid on this very run only. Checked before
            # the id's shape, so a caller without a valid token learns nothing but 401.
            if "run_id" not in path or scope not in STREAM_TOKEN_SCOPES:
                raise
            run_id = path["run_id"]
            tenant_id = verify_token(secret, value, run_id=_canonical(run_id), scope=scope)
            return Caller(runtime, Principal(tenant_id=tenant_id), None, path)
        caller = Caller(runtime, Principal(tenant_id=grant.tenant_id), grant, path)
        if "thread_id" in path and not _same_id(path["thread_id"], grant.thread_id):
            raise caller.outside()
        require_scope(grant, scope)
    except (InvalidToken, MissingScope) as exc:
        raise _token_problem(exc) from exc
    return caller


def _canonical(run_id: str) -> str:
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return run_id


def caller(scope: str) -> Callable[..., Awaitable[Caller]]:
    """The dependency of a route a thread token with ``scope`` may call (``read``, ``run``,
    ``resume``, ``cancel``); a stream token may call those with ``read`` and ``resume``."""

    async def resolve(request: Request, runtime: RuntimeDep, credentials: Credentials, token: TokenQuery = None) -> Caller:
        return await resolve_caller(scope, request, runtime, credentials, token)

    resolve.__name__ = f"caller_{scope}"
    return resolve


Reader = Annotated[Caller, Depends(caller("read"))]
Runner = Annotated[Caller, Depends(caller("run"))]
Resumer = Annotated[Caller, Depends(caller("resume"))]
Canceller = Annotated[Caller, Depends(caller("cancel"))]
