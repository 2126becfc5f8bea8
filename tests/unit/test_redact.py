"""The shared redactor against a corpus of real-looking secrets and of text that must survive."""

from __future__ import annotations

import pytest

from app.guards.redact import MASK, Redactor

SECRETS = [
    # (text, the secret that must disappear)
    (
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "eyJhbGciOiJIUzI1NiJ9",
    ),
    ("curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' https://x", "dXNlcjpodW50ZXIy"),
    ("use bearer abcdef0123456789abcdef for it", "abcdef0123456789abcdef"),
    ("OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123"),
    ("key sk-abcdefghijklmnopqrstuvwxyz012345 leaked", "sk-abcdefghijklmnopqrstuvwxyz012345"),
    ("anthropic: sk-ant-api03-AbCdEf_GhIj-KlMn0123", "sk-ant-api03-AbCdEf_GhIj-KlMn0123"),
    (
        "git clone https://ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345@github.com/o/r",
        "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
    ),
    (
        "GITHUB_TOKEN github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    ),
    ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
    ("maps AIzaSyA-1234567890abcdefghijklmnopqrstu ok", "AIzaSyA-1234567890abcdefghijklmnopqrstu"),
    ("aws AKIAIOSFODNN7EXAMPLE in config", "AKIAIOSFODNN7EXAMPLE"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ('{"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}', "wJalrXUtnFEMI/K7MDENG"),
    ("connect password=hunter2 host=db", "hunter2"),
    ("DB_PASSWORD: 'c0rrect horse'", "c0rrect horse"),
    ('{"client_secret": "s3cr3t-value"}', "s3cr3t-value"),
    ("https://example.com/cb?token=abc123def&x=1", "abc123def"),
    ("export SECRET=topsecret", "topsecret"),
    ("postgresql://runq:pa55word@db.internal:5432/runq", "pa55word"),
    ("redis://:onlypass@cache:6379/0", "onlypass"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (cut)",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ),
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkgXyZ\n-----END EC PRIVATE KEY-----", "MHcCAQEEIBkgXyZ"),
    ("stripe sk_live_51H8abcdefghijklmnopqrstuv", "sk_live_51H8abcdefghijklmnopqrstuv"),
    ("restricted rk_test_51H8abcdefghijklmnopqrstuv", "rk_test_51H8abcdefghijklmnopqrstuv"),
    ("HF_HOME=/x hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"),
    ("git push https://oauth2@gitlab.com glpat-abcdefghij1234567890", "glpat-abcdefghij1234567890"),
    ("groq gsk_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH", "gsk_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"),
    ("xai-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH in use", "xai-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"),
    ("//registry.npmjs.org/:_authToken npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("sendgrid SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789", "SG.abcdefghijklmnopqrstuv"),
    (
        "cookie eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        "dozjgNryP4J3jVmNHl0w5N",
    ),
    ("AccountKey=abcdEFGH1234567890abcdEFGH12==;EndpointSuffix=core", "abcdEFGH1234567890"),
    ("aws_session_token: IQoJb3JpZ2luX2VjEJr//////////wEaCXVz", "IQoJb3JpZ2luX2VjEJr"),
    ("mysql://root:hunter2@localhost/db", "hunter2"),
]

HARMLESS = [
    "max_tokens: 512",
    "The model used 1234 tokens in 3 turns.",
    "ls -la /tmp && echo done",
    "https://example.com/path?page=2",
    "a bearer of bad news",
    "sk-1 is too short to be a key",
    "exit code 0, 14 files changed",
    '{"tool_call_id": "call_abc123", "name": "shell"}',
    "shelf_life_days=30 and hf_ alone",
    "pk_live_51H8abcdefghijklmnopqrstuv is a publishable key",
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_is_masked(text: str, secret: str) -> None:
    out = Redactor().text(text)
    assert secret not in out
    assert "[REDACTED" in out


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_text_survives(text: str) -> None:
    assert Redactor().text(text) == text


def test_context_around_a_secret_is_kept() -> None:
    out = Redactor().text("postgresql://runq:pa55word@db:5432/runq and password=x1")
    assert out == f"postgresql://runq:{MASK}@db:5432/runq and password={MASK}"


def test_quoted_values_keep_their_quotes() -> None:
    assert Redactor().text('{"password": "hunter2"}') == f'{{"password": "{MASK}"}}'


def test_data_is_redacted_recursively_and_secret_keys_masked() -> None:
    data = {
        "text": "token=abc123",
        "nested": [{"api_key": "plain-looking"}, "sk-abcdefghijklmnopqrstuvwxyz"],
        "count": 3,
        "ok": None,
    }
    assert Redactor().data(data) == {
        "text": f"token={MASK}",
        "nested": [{"api_key": MASK}, MASK],
        "count": 3,
        "ok": None,
    }


def test_paths_under_roots_are_shortened() -> None:
    redactor = Redactor(["/home/alice/", "/home/alice/work", "/srv"])
    text = "error in /home/alice/work/app/x.py and /home/alice/.bashrc, not /srvx/y"
    assert redactor.text(text) == "error in …/app/x.py and …/.bashrc, not /srvx/y"


def test_redaction_is_idempotent() -> None:
    redactor = Redactor()
    once = redactor.text(" ".join(text for text, _ in SECRETS))
    assert redactor.text(once) == once


def test_text_outside_ascii_gets_every_rule() -> None:
    # IGNORECASE folds U+017F to "s": no lowercase trigger finds it, so non-ASCII text is scanned whole
    assert Redactor().text("\u017fecret=hunter2 ok") == "\u017fecret=[REDACTED] ok"
