"""Bearer-key authentication, the admin check and stream tokens, as FastAPI dependencies."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Path, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.deps import RuntimeDep
from app.api.keys import Principal, find_key
from app.api.problems import ApiProblem
from app.api.tokens import InvalidToken, MissingScope, verify_token

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer rq_…`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _unauthorized(detail: str, *, error: str | None = None) -> ApiProblem:
    challenge = f'Bearer error="{error}"' if error else "Bearer"
    return ApiProblem(401, "unauthorized", detail, headers={"WWW-Authenticate": challenge})


async def authenticate(runtime: RuntimeDep, credentials: Credentials) -> Principal:
    """The caller's tenant from ``Authorization: Bearer <key>``; 401 otherwise."""
    if credentials is None:
        raise _unauthorized("an API key is required: Authorization: Bearer <key>")
    principal = await find_key(runtime.engine, credentials.credentials)
    if principal is None:
        raise _unauthorized("the API key is unknown or revoked", error="invalid_token")
    return principal


Tenant = Annotated[Principal, Depends(authenticate)]


async def require_admin(principal: Tenant) -> Principal:
    """Admin routes; a tenant key is known but not allowed (403, unlike another tenant's run)."""
    if not principal.is_admin:
        raise ApiProblem(403, "forbidden", "this route needs an admin key")
    return principal


Admin = Annotated[Principal, Depends(require_admin)]


async def _key_or_token(
    runtime: RuntimeDep, credentials: Credentials, run_id: str, token: str | None, *, scope: str
) -> Principal:
    """A bearer key, or a stream token valid for this very run and ``scope`` (checked before the
    id's shape, so a caller without credentials learns nothing but 401)."""
    if credentials is not None or token is None:
        return await authenticate(runtime, credentials)
    try:
        tenant_id = verify_token(runtime.settings.secret_key or "", token, run_id=_canonical(run_id), scope=scope)
    except InvalidToken as exc:
        raise _unauthorized(f"invalid stream token: {exc}", error="invalid_token") from exc
    except MissingScope as exc:
        raise ApiProblem(
            403, "insufficient_scope", str(exc), headers={"WWW-Authenticate": 'Bearer error="insufficient_scope"'}
        ) from exc
    return Principal(tenant_id=tenant_id)


async def authenticate_stream(
    runtime: RuntimeDep,
    credentials: Credentials,
    run_id: Annotated[str, Path()],
    token: Annotated[
        str | None,
        Query(description="A stream token from `POST /runs/{id}/stream-token`, for `EventSource`"),
    ] = None,
) -> Principal:
    """The events: a bearer key, or a stream token with the ``read`` scope for this run."""
    return await _key_or_token(runtime, credentials, run_id, token, scope="read")


async def authenticate_resume(
    runtime: RuntimeDep,
    credentials: Credentials,
    run_id: Annotated[str, Path()],
    token: Annotated[
        str | None,
        Query(description="A stream token with the `resume` scope, from `POST /runs/{id}/stream-token`"),
    ] = None,
) -> Principal:
    """Resume (docs/waits.md): a bearer key, or a stream token with the ``resume`` scope for this run."""
    return await _key_or_token(runtime, credentials, run_id, token, scope="resume")


def _canonical(run_id: str) -> str:
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return run_id


StreamReader = Annotated[Principal, Depends(authenticate_stream)]
Resumer = Annotated[Principal, Depends(authenticate_resume)]
