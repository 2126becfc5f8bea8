"""Stream tokens and list cursors, without a database."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime

import pytest

from app.api.params import decode_cursor, encode_cursor
from app.api.problems import ApiProblem
from app.api.tokens import InvalidToken, MissingScope, _sign, issue_token, verify_token

SECRET = "s" * 32


def test_token_names_its_run_tenant_and_expiry() -> None:
    run_id = uuid.uuid4()
    token, expires_at = issue_token(SECRET, run_id=run_id, tenant_id="acme:eu", ttl_s=60, now=1000.0)
    assert expires_at == datetime.fromtimestamp(1060.0, UTC)
    assert verify_token(SECRET, token, run_id=str(run_id), now=1059.0) == "acme:eu"
    with pytest.raises(InvalidToken, match="expired"):
        verify_token(SECRET, token, run_id=str(run_id), now=1060.0)
    with pytest.raises(InvalidToken, match="another run"):
        verify_token(SECRET, token, run_id=str(uuid.uuid4()), now=1000.0)


def test_a_tampered_payload_fails_the_signature() -> None:
    run_id, other = uuid.uuid4(), uuid.uuid4()
    token, _ = issue_token(SECRET, run_id=run_id, tenant_id="a", ttl_s=60)
    payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps(claims | {"r": str(other)}).encode()).decode().rstrip("=")
    for bad in (f"{forged}.{signature}", payload, "", "..", "é.é"):
        with pytest.raises(InvalidToken):
            verify_token(SECRET, bad, run_id=str(other))


def test_cursor_round_trip_and_garbage() -> None:
    position = (datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), uuid.uuid4())
    assert decode_cursor(encode_cursor(*position)) == position
    naive = base64.urlsafe_b64encode(json.dumps(["2026-01-02T03:04:05", str(uuid.uuid4())]).encode()).decode()
    for bad in ("", "!!", "é", base64.urlsafe_b64encode(b"[1]").decode(), naive):
        with pytest.raises(ApiProblem) as caught:
            decode_cursor(bad)
        assert (caught.value.status, caught.value.code) == (400, "invalid_cursor")


def test_scopes_say_what_a_token_may_do() -> None:
    run_id = uuid.uuid4()
    read, _ = issue_token(SECRET, run_id=run_id, tenant_id="a", ttl_s=60)
    both, _ = issue_token(SECRET, run_id=run_id, tenant_id="a", ttl_s=60, scopes=["resume", "read"])
    assert verify_token(SECRET, read, run_id=str(run_id)) == "a"
    with pytest.raises(MissingScope, match="'resume'"):
        verify_token(SECRET, read, run_id=str(run_id), scope="resume")
    assert verify_token(SECRET, both, run_id=str(run_id), scope="resume") == "a"
    # a token issued before scopes existed names none: it reads, it does not resume
    claims = {"r": str(run_id), "t": "a", "e": time.time() + 60}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    old = f"{payload}.{_sign(SECRET, payload)}"
    assert verify_token(SECRET, old, run_id=str(run_id)) == "a"
    with pytest.raises(MissingScope):
        verify_token(SECRET, old, run_id=str(run_id), scope="resume")
