"""Thread tokens, without a database: what they carry, expiry, scopes, and that neither kind of
token passes for the other."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from app.api.auth import Caller
from app.api.keys import Principal
from app.api.problems import ApiProblem
from app.api.tokens import (
    InvalidToken,
    MissingScope,
    TokenExpired,
    issue_thread_token,
    issue_token,
    require_scope,
    verify_thread_token,
    verify_token,
)

SECRET = "s" * 32


def test_a_thread_token_names_its_thread_tenant_scopes_binding_and_expiry() -> None:
    thread_id = uuid.uuid4()
    token, expires_at = issue_thread_token(
        SECRET, tenant_id="acme", thread_id=thread_id, scopes=["run", "read", "read"], ttl_s=60,
        agent="demo", input={"steps": 1}, now=1000.0,
    )  # fmt: skip
    grant = verify_thread_token(SECRET, token, now=1059.0)
    assert (grant.tenant_id, grant.thread_id, grant.scopes) == ("acme", thread_id, frozenset({"read", "run"}))
    assert (grant.agent, grant.input, grant.expires_at) == ("demo", {"steps": 1}, expires_at)
    assert expires_at == datetime.fromtimestamp(1060.0, UTC)
    with pytest.raises(TokenExpired):
        verify_thread_token(SECRET, token, now=1060.0)
    with pytest.raises(InvalidToken, match="signature"):
        verify_thread_token("t" * 32, token, now=1000.0)


def test_scopes_are_checked_one_by_one() -> None:
    token, _ = issue_thread_token(SECRET, tenant_id="a", thread_id=uuid.uuid4(), scopes=["read"], ttl_s=60)
    grant = verify_thread_token(SECRET, token)
    require_scope(grant, "read")
    for scope in ("run", "resume", "cancel"):
        with pytest.raises(MissingScope, match=scope):
            require_scope(grant, scope)
    assert (grant.agent, grant.input) == (None, None)


def test_a_stream_token_is_no_thread_token_and_the_other_way_round() -> None:
    run_id = uuid.uuid4()
    stream, _ = issue_token(SECRET, run_id=run_id, tenant_id="a", ttl_s=60)
    thread, _ = issue_thread_token(SECRET, tenant_id="a", thread_id=run_id, scopes=["read"], ttl_s=60)
    with pytest.raises(InvalidToken, match="not a thread token"):
        verify_thread_token(SECRET, stream)
    with pytest.raises(InvalidToken, match="another run"):  # even with the same id
        verify_token(SECRET, thread, run_id=str(run_id))


def test_an_expired_stream_token_says_so() -> None:
    run_id = uuid.uuid4()
    token, _ = issue_token(SECRET, run_id=run_id, tenant_id="a", ttl_s=1, now=1000.0)
    with pytest.raises(TokenExpired):
        verify_token(SECRET, token, run_id=str(run_id), now=1001.0)


def test_a_caller_with_a_token_is_held_to_its_scopes_and_a_key_is_not() -> None:
    token, _ = issue_thread_token(SECRET, tenant_id="a", thread_id=uuid.uuid4(), scopes=["run"], ttl_s=60)
    with_token = Caller(None, Principal("a"), verify_thread_token(SECRET, token), {})  # type: ignore[arg-type]
    with_token.require("run")
    with pytest.raises(ApiProblem) as refused:
        with_token.require("resume")
    assert (refused.value.status, refused.value.code) == (403, "insufficient_scope")
    Caller(None, Principal("a"), None, {}).require("resume")  # type: ignore[arg-type]
