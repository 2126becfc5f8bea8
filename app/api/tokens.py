"""Stream tokens: a browser ``EventSource`` cannot send headers, so it shows this in ``?token=``.

A token is ``<payload>.<signature>`` (both base64url), the payload naming one run, its tenant,
its scopes and an expiry, signed with HMAC-SHA256 under ``RUNQ_SECRET_KEY``. It is only ever
accepted for that run, and only for what its scopes allow (``read``: the events; ``resume``:
``POST /runs/{id}/resume``, docs/waits.md), so a leaked URL exposes one run for a few minutes
at most. A token without scopes (issued before they existed) is ``read`` only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from app.api.schemas import StreamToken, TokenScope
from app.domain import Run
from app.settings import Settings

DEFAULT_SCOPES: tuple[TokenScope, ...] = ("read",)


class InvalidToken(Exception):
    """The token is malformed, forged, expired or for another run."""


class MissingScope(Exception):
    """The token is valid for the run but does not allow this (a read-only token on resume)."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def issue_token(
    secret: str,
    *,
    run_id: uuid.UUID,
    tenant_id: str,
    ttl_s: float,
    scopes: Sequence[str] = DEFAULT_SCOPES,
    now: float | None = None,
) -> tuple[str, datetime]:
    """A token for ``run_id`` and its expiry."""
    expires = (time.time() if now is None else now) + ttl_s
    claims = {"r": str(run_id), "t": tenant_id, "e": expires, "s": sorted(set(scopes))}
    payload = _b64(json.dumps(claims).encode())
    return f"{payload}.{_sign(secret, payload)}", datetime.fromtimestamp(expires, UTC)


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
    """The tenant the token was issued to; :class:`InvalidToken` unless it is valid for ``run_id``
    (the canonical string form of the run's UUID), :class:`MissingScope` unless it allows ``scope``."""
    payload, _, signature = token.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(secret, payload).encode()):
        raise InvalidToken("bad signature")
    try:
        claims = json.loads(_unb64(payload))
        run, tenant, expires = str(claims["r"]), str(claims["t"]), float(claims["e"])
        scopes = [str(s) for s in claims.get("s", DEFAULT_SCOPES)]
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise InvalidToken("malformed token") from exc
    if run != run_id:
        raise InvalidToken("the token is for another run")
    if expires <= (time.time() if now is None else now):
        raise InvalidToken("the token has expired")
    if scope not in scopes:
        raise MissingScope(f"the token does not allow {scope!r} (its scopes: {', '.join(scopes)})")
    return tenant
