"""Signed tokens for browsers, which hold no tenant key.

A token is ``<payload>.<signature>`` (both base64url): a JSON payload of claims signed with
HMAC-SHA256 under ``RUNQ_SECRET_KEY``, with the tenant and an expiry. Two kinds share that form:

- a **stream token** names one run (``POST /runs/{id}/stream-token``): a browser ``EventSource``
  cannot send headers, so it shows it in ``?token=``. Only ever accepted for that run, and only
  for what its scopes allow (``read``: the events; ``resume``: ``POST /runs/{id}/resume``,
  docs/waits.md), so a leaked URL exposes one run for a few minutes at most. A token without
  scopes (issued before they existed) is ``read`` only.
- a **thread token** names one thread (``POST /threads/{id}/token``, docs/threads.md): a chat
  page reads the thread and starts, follows, cancels and resumes its runs, nothing else; it may
  bind the agent and input fields its runs get.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.api.schemas import StreamToken, TokenScope
from app.domain import Run
from app.settings import Settings

DEFAULT_SCOPES: tuple[TokenScope, ...] = ("read",)
THREAD_KIND = "thread"  # the claim "k" of a thread token; a stream token has none


class InvalidToken(Exception):
    """The token is malformed, forged, or for another run or thread."""


class TokenExpired(InvalidToken):
    """The token was valid until its expiry, which has passed."""


class MissingScope(Exception):
    """The token is valid here but does not allow this (a read-only token on resume)."""


@dataclass(frozen=True, slots=True)
class ThreadGrant:
    """What a verified thread token allows: one thread of one tenant, its scopes, and the
    agent and input fields its runs are bound to (None: the caller chooses)."""

    tenant_id: str
    thread_id: uuid.UUID
    scopes: frozenset[str]
    expires_at: datetime
    agent: str | None = None
    input: dict[str, Any] | None = None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def _seal(secret: str, claims: dict[str, Any], ttl_s: float, now: float | None) -> tuple[str, datetime]:
    """``claims`` with an expiry ``ttl_s`` from now, signed; the token and its expiry."""
    expires = (time.time() if now is None else now) + ttl_s
    payload = _b64(json.dumps(claims | {"e": expires}, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, payload)}", datetime.fromtimestamp(expires, UTC)


def _open(secret: str, token: str, now: float | None) -> dict[str, Any]:
    """The claims of a token signed with ``secret`` and not expired."""
    payload, _, signature = token.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(secret, payload).encode()):
        raise InvalidToken("bad signature")
    try:
        claims = json.loads(_unb64(payload))
        expires = float(claims["e"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise InvalidToken("malformed token") from exc
    if expires <= (time.time() if now is None else now):
        raise TokenExpired("the token has expired")
    return claims


def _check_scope(scopes: Iterable[str], scope: str) -> None:
    if scope not in scopes:
        raise MissingScope(f"the token does not allow {scope!r} (its scopes: {', '.join(sorted(scopes))})")


def issue_token(
    secret: str,
    *,
    run_id: uuid.UUID,
    tenant_id: str,
    ttl_s: float,
    scopes: Sequence[str] = DEFAULT_SCOPES,
    now: float | None = None,
) -> tuple[str, datetime]:
    """A stream token for ``run_id`` and its expiry."""
    return _seal(secret, {"r": str(run_id), "t": tenant_id, "s": sorted(set(scopes))}, ttl_s, now)


def stream_token(run: Run, settings: Settings, scopes: Sequence[TokenScope] = DEFAULT_SCOPES) -> StreamToken:
    """The ``POST …/stream-token`` answer for ``run`` (tenant and admin routes alike)."""
    token, expires_at = issue_token(
        settings.secret_key or "",
        run_id=run.id,
        tenant_id=run.tenant_id,
        ttl_s=settings.stream_token_ttl_s,
        scopes=scopes,
    )
    return StreamToken(token=token, expires_at=expires_at, scopes=sorted(set(scopes)))


def verify_token(
    secret: str, token: str, *, run_id: str, scope: str = "read", now: float | None = None
) -> str:
    """The tenant a stream token was issued to; :class:`InvalidToken` unless it is valid for
    ``run_id`` (the canonical string form of the run's UUID), :class:`MissingScope` unless it
    allows ``scope``."""
    claims = _open(secret, token, now)
    if claims.get("k") is not None or str(claims.get("r")) != run_id:
        raise InvalidToken("the token is for another run")
    _check_scope([str(s) for s in claims.get("s", DEFAULT_SCOPES)], scope)
    return str(claims.get("t"))


def token_kind(secret: str, token: str) -> str | None:
    """``"thread"`` or ``"stream"`` for a valid token of either kind, else None: what a route that
    needs a key tells a caller who sent a token instead."""
    try:
        claims = _open(secret, token, None)
    except InvalidToken:
        return None
    return "thread" if claims.get("k") == THREAD_KIND else "stream"


def issue_thread_token(
    secret: str,
    *,
    tenant_id: str,
    thread_id: uuid.UUID,
    scopes: Sequence[str],
    ttl_s: float,
    agent: str | None = None,
    input: dict[str, Any] | None = None,
    now: float | None = None,
) -> tuple[str, datetime]:
    """A thread token and its expiry."""
    claims: dict[str, Any] = {"k": THREAD_KIND, "th": str(thread_id), "t": tenant_id, "s": sorted(set(scopes))}
    if agent is not None:
        claims["a"] = agent
    if input is not None:
        claims["i"] = input
    return _seal(secret, claims, ttl_s, now)


def verify_thread_token(secret: str, token: str, *, now: float | None = None) -> ThreadGrant:
    """What a thread token allows; :class:`InvalidToken` (:class:`TokenExpired`) unless it is
    one, signed with ``secret`` and not expired."""
    claims = _open(secret, token, now)
    if claims.get("k") != THREAD_KIND:
        raise InvalidToken("not a thread token")
    try:
        bound_input = claims.get("i")
        if bound_input is not None and not isinstance(bound_input, dict):
            raise TypeError("input")
        return ThreadGrant(
            tenant_id=str(claims["t"]),
            thread_id=uuid.UUID(str(claims["th"])),
            scopes=frozenset(str(s) for s in claims["s"]),
            expires_at=datetime.fromtimestamp(float(claims["e"]), UTC),
            agent=None if claims.get("a") is None else str(claims["a"]),
            input=bound_input,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidToken("malformed token") from exc


def require_scope(grant: ThreadGrant, scope: str) -> None:
    """:class:`MissingScope` unless the thread token allows ``scope``."""
    _check_scope(grant.scopes, scope)
