"""The admin key ``runq dev`` prints, kept across restarts.

Minting a new admin key at every ``make run`` left one live ``dev`` admin key per restart and
changed the ``export RUNQ_KEY=…`` line each time. The key is kept in the data folder (``dev_key``,
mode 0600, like the development secret key); the database holds only its digest, as for every
key. A kept key that the database does not know, or that was revoked, is replaced.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from app.api.keys import insert_key, live_key
from app.db.engine import create_engine

DEV_TENANT = "dev"
DEV_KEY_FILE = "dev_key"


async def dev_key(url: str, folder: Path) -> tuple[str, bool]:
    """The kept key if it is still a live admin key of ``dev`` here, else a new one (kept);
    and whether it was reused."""
    path = folder / DEV_KEY_FILE
    kept = _read(path)
    engine = create_engine(url, pool_size=1, application_name="runq-dev")
    try:
        if kept is not None:
            principal = await live_key(engine, kept)
            if principal is not None and principal.tenant_id == DEV_TENANT and principal.is_admin:
                return kept, True
        key = await insert_key(engine, tenant_id=DEV_TENANT, admin=True)
    finally:
        await engine.dispose()
    _write(path, key)
    return key, False


def read_dev_key(folder: Path) -> str | None:
    """The kept key, for commands of a second terminal that ask the running API."""
    return _read(folder / DEV_KEY_FILE)


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text().strip() or None
    return None


def _write(path: Path, key: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    os.replace(staging, path)  # a reader never sees half a key
