"""Who calls ``/langgraph``: the LangGraph SDKs send the key as ``x-api-key``; runq's
``Authorization: Bearer`` (a key or a thread token) works too. Either way the caller is runq's
:class:`~app.api.auth.Caller`, so scopes, thread tokens and tenants are checked as everywhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials

from app.api.auth import Caller, Credentials, resolve_caller
from app.api.deps import RuntimeDep
from app.api.keys import KEY_PREFIX
from app.api.problems import ApiProblem

ApiKeyHeader = Annotated[
    str | None,
    Header(
        alias="x-api-key",
        description="An API key (or a thread token), as the LangGraph SDKs send it",
    ),
]


def caller(scope: str) -> Callable[..., Awaitable[Caller]]:
    """The dependency of a route a thread token with ``scope`` may call (``read``, ``run``,
    ``resume``, ``cancel``); a key opens every route of its tenant."""

    async def resolve(
        request: Request,
        runtime: RuntimeDep,
        credentials: Credentials,
        x_api_key: ApiKeyHeader = None,
    ) -> Caller:
        if credentials is None and x_api_key:
            credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=x_api_key)
        caller = await resolve_caller(scope, request, runtime, credentials, None)
        if (
            caller.grant is None
            and credentials is not None
            and not credentials.credentials.startswith(KEY_PREFIX)
        ):
            # A stream token: it opens its run's events on runq's own route, nothing here.
            raise ApiProblem(
                401,
                "unauthorized",
                "a stream token opens only GET /runs/{id}/events",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return caller

    resolve.__name__ = f"langgraph_caller_{scope}"
    return resolve


Reader = Annotated[Caller, Depends(caller("read"))]
Runner = Annotated[Caller, Depends(caller("run"))]
Canceller = Annotated[Caller, Depends(caller("cancel"))]


async def require_key(caller: Reader) -> Caller:
    """Routes that are not one thread's (search, assistants, the store): a key, never a token."""
    if caller.grant is not None:
        raise caller.outside()
    return caller


Tenant = Annotated[Caller, Depends(require_key)]
