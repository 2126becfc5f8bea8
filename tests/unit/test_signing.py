"""Webhook signatures checked by an independent implementation of the Standard Webhooks
scheme, and secrets sealed at rest."""

from __future__ import annotations

import base64

import pytest

from app.guards.signing import SecretBox, SecretUnreadable, new_secret, signature_headers
from tests.webhook_support import verify_signature


def test_signature_verifies_independently_and_breaks_on_any_change() -> None:
    secret = new_secret()
    body = '{"type":"run.completed","event":{"seq":7}}'
    headers = signature_headers(secrets_=[secret], msg_id="0b7c5a1e", body=body, timestamp=1_764_600_000)
    assert headers["webhook-id"] == "0b7c5a1e"
    assert headers["webhook-timestamp"] == "1764600000"
    assert verify_signature(secret, headers, body.encode())
    assert not verify_signature(secret, headers, body.replace("7", "8").encode())
    assert not verify_signature(secret, headers | {"webhook-timestamp": "1764600001"}, body.encode())
    assert not verify_signature(new_secret(), headers, body.encode())


def test_two_secrets_sign_twice_and_either_verifies() -> None:
    old, new = new_secret(), new_secret()
    headers = signature_headers(secrets_=[new, old], msg_id="m", body="{}")
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert all(sig.startswith("v1,") for sig in headers["webhook-signature"].split(" "))
    assert verify_signature(old, headers, b"{}") and verify_signature(new, headers, b"{}")


def test_secret_format() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret.removeprefix("whsec_"))) == 24


def test_sealed_secret_opens_only_with_the_same_key() -> None:
    secret = new_secret()
    sealed = SecretBox("k" * 40).seal(secret)
    assert secret not in sealed and secret.removeprefix("whsec_") not in sealed
    assert SecretBox("k" * 40).open(sealed) == secret
    with pytest.raises(SecretUnreadable):
        SecretBox("j" * 40).open(sealed)
