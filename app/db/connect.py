"""Every asyncpg connection runq opens, over a host list one host at a time.

asyncpg walks a host list itself, but under one timeout for the whole walk: a host that is
gone without a word (a dead machine drops the SYN, nothing refuses it) holds the connect until
that timeout and the hosts after it are never tried. Here each host gets its own timeout, as
libpq's ``connect_timeout``, and whatever says "not this one" (unreachable, starting up, no
primary: :func:`~app.db.errors.database_down`) moves on to the next. SQLAlchemy's pools call it
through the asyncpg dialect's ``async_creator_fn``; the LISTEN sessions call it directly.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from app.db.errors import database_down
from app.db.url import DatabaseURL, parse_url

CONNECT_TIMEOUT_S = 5.0  # per host


async def connect(
    dsn: str | None = None,
    *,
    host: str | list[str] | None = None,
    port: int | str | list[int] | list[str] | None = None,
    per_host_timeout_s: float = CONNECT_TIMEOUT_S,
    **options: Any,
) -> asyncpg.Connection:
    """``asyncpg.connect`` with the same arguments, trying the hosts of ``dsn`` (or of the
    ``host``/``port`` lists SQLAlchemy passes) in turn, each for up to ``per_host_timeout_s``
    (or the URL's ``timeout``) seconds."""
    timeout = float(options.pop("timeout", per_host_timeout_s))
    tries: list[dict[str, Any]]
    if dsn is not None:
        url = parse_url(dsn)
        tries = [{"dsn": DatabaseURL((h,), url.database, url.user, url.password, url.query).render()} for h in url.hosts]
        tries = tries or [{"dsn": dsn}]
    elif isinstance(host, list):
        ports = port if isinstance(port, list) else [port] * len(host)
        tries = [{"host": h, "port": int(p) if p is not None else None} for h, p in zip(host, ports, strict=True)]
    else:
        tries = [{"host": host, "port": port}]
    last: BaseException | None = None
    for where in tries:
        try:
            return await asyncpg.connect(**where, timeout=timeout, **options)
        except Exception as exc:
            if not database_down(exc):
                raise  # a bad password, a missing database: no other host would say otherwise
            last = exc
    assert last is not None
    raise last
