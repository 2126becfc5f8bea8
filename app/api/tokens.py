"""Stream tokens: a browser ``EventSource`` cannot send headers, so it shows this in ``?token=``.

A token is ``<payload>.<signature>`` (both base64url), the payload naming one run, its tenant and
an expiry, signed with HMAC-SHA256 under ``RUNQ_SECRET_KEY``. It is only ever accepted on that
run's events, so a leaked URL exposes one run's stream for a few minutes at most.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime

from app.api.schemas import StreamToken
from app.domain import Run
from app.settings import Settings


class InvalidToken(Exception):
    """The token is malformed, forged, expired or for another run."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def issue_token(
    secret: str, *, run_id: uuid.UUID, tenant_id: str, ttl_s: float, now: float | None = None
) -> tuple[str, datetime]:
    """A token for ``run_id`` and its expiry."""
    expires = (time.time() if now is None else now) + ttl_s
    payload = _b64(json.dumps({"r": str(run_id), "t": tenant_id, "e": expires}).encode())
    return f"{payload}.{_sign(secret, payload)}", datetime.fromtimestamp(expires, UTC)


def stream_token(run: Run, settings: Settings) -> StreamToken:
    """The ``POST …/stream-token`` answer for ``run`` (tenant and admin routes alike)."""
    token, expires_at = issue_token(
        settings.secret_key or "", run_id=run.id, tenant_id=run.tenant_id, ttl_s=settings.stream_token_ttl_s
    )
    return StreamToken(token=token, expires_at=expires_at)


def verify_token(secret: str, token: str, *, run_id: str, now: float | None = None) -> str:
    """The tenant the token was issued to; :class:`InvalidToken` unless it is valid for ``run_id``
    (the canonical string form of the run's UUID)."""
    payload, _, signature = token.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(secret, payload).encode()):
        raise InvalidToken("bad signature")
    try:
        claims = json.loads(_unb64(payload))
        run, tenant, expires = str(claims["r"]), str(claims["t"]), float(claims["e"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise InvalidToken("malformed token") from exc
    if run != run_id:
        raise InvalidToken("the token is for another run")
    if expires <= (time.time() if now is None else now):
        raise InvalidToken("the token has expired")
    return tenant
