"""Webhook signatures (the Standard Webhooks scheme) and the tenants' secrets at rest.

Signing goes through the ``standardwebhooks`` package, the specification's own reference
implementation, so the bytes signed (``id.timestamp.body``) and the header format
(``v1,<base64>``, space-separated when two secrets sign) are exactly what its verifiers expect.

Secrets are stored encrypted (Fernet: AES-128-CBC with an HMAC-SHA256 tag) under a key derived
from ``RUNQ_SECRET_KEY`` with HKDF, so a dump of the database alone does not reveal them; the
API and the workers must share ``RUNQ_SECRET_KEY`` (they already do for stream tokens).
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from standardwebhooks.webhooks import Webhook

if TYPE_CHECKING:
    from app.queue import Queue

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24  # as Svix issues them; the spec asks for 24 to 64 bytes
_KDF_INFO = b"runq webhook secrets v1"


class SecretUnreadable(Exception):
    """A stored secret does not decrypt with this ``RUNQ_SECRET_KEY`` (the key changed)."""


def new_secret() -> str:
    """A fresh signing secret, ``whsec_`` and base64 of random bytes (the spec's format)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


class SecretBox:
    """Encrypts and decrypts signing secrets with a key derived from ``RUNQ_SECRET_KEY``."""

    def __init__(self, secret_key: str) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KDF_INFO).derive(secret_key.encode())
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode()
        except InvalidToken as exc:
            raise SecretUnreadable("the webhook secret does not decrypt with this RUNQ_SECRET_KEY") from exc


def signature_headers(
    *, secrets_: Sequence[str], msg_id: str, body: str, timestamp: int | None = None
) -> dict[str, str]:
    """``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` (one ``v1,`` signature per
    secret, the current one first), for ``body`` exactly as it is sent."""
    ts = int(time.time()) if timestamp is None else timestamp
    at = datetime.fromtimestamp(ts, tz=UTC)
    signatures = " ".join(Webhook(secret).sign(msg_id, at, body) for secret in secrets_)
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signatures}


class TenantSecrets:
    """The tenants' signing secrets in clear for those who need them (the tenant's own key,
    the sender), sealed in the database."""

    ROTATION_OVERLAP_S = 86400.0  # the old secret keeps signing this long after a rotation

    def __init__(self, queue: Queue, secret_key: str) -> None:
        self._queue = queue
        self._box = SecretBox(secret_key)

    async def current(self, tenant_id: str) -> str:
        """The tenant's secret, created on first use."""
        sealed = await self._queue.sealed_webhook_secrets(tenant_id)
        if sealed is None:
            return self._box.open(await self._queue.create_webhook_secret(tenant_id, sealed=self._box.seal(new_secret())))
        return self._box.open(sealed[0])

    async def rotate(self, tenant_id: str) -> str:
        """A new secret for the tenant; the old one also signs for :attr:`ROTATION_OVERLAP_S`."""
        secret = new_secret()
        await self._queue.rotate_webhook_secret(tenant_id, sealed=self._box.seal(secret), overlap_s=self.ROTATION_OVERLAP_S)
        return secret

    async def signing(self, tenant_id: str) -> list[str]:
        """The secrets that sign the tenant's deliveries: the current one, then the previous
        one while its overlap lasts (unless it no longer decrypts, after a key change)."""
        sealed = await self._queue.sealed_webhook_secrets(tenant_id)
        if sealed is None:
            return [await self.current(tenant_id)]
        current, previous = sealed
        found = [self._box.open(current)]
        if previous is not None:
            with contextlib.suppress(SecretUnreadable):
                found.append(self._box.open(previous))
        return found
