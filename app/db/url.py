"""``RUNQ_DATABASE_URL`` read once, whatever its form, and rendered for each driver layer.

A URL may name several hosts, in libpq's form (``postgresql://u@h1:p1,h2:p2/db``) or in
SQLAlchemy's (``postgresql://u@/db?host=h1:p1&host=h2:p2``). SQLAlchemy's ``make_url`` refuses
the first and asyncpg reads only the last ``host`` of the second, so every connection runq
makes — the pools, the LISTEN session, migrations, the CLI — takes its URL from here. With
several hosts ``target_session_attrs`` defaults to ``read-write``: asyncpg then tries each
host in turn and keeps only a primary that takes writes (a standby or a read-only server is
passed over), which is what the operator of a failover pair means.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

DEFAULT_PORT = 5432
SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg")
PRIMARY_ONLY = ("target_session_attrs", "read-write")


@dataclass(frozen=True, slots=True)
class Host:
    """One server of the list; ``host`` may be a unix socket folder (then the port names the
    socket file). No port: the driver's default (``PGPORT``, else 5432)."""

    host: str
    port: int | None = None

    def render(self, *, port: bool = False) -> str:
        """``host:port``; ``port`` writes the default one out (SQLAlchemy's list needs it)."""
        name = f"[{self.host}]" if ":" in self.host else quote(self.host, safe="")
        number = self.port or (DEFAULT_PORT if port else None)
        return f"{name}:{number}" if number else name


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    """A PostgreSQL URL with its host list apart from its other options."""

    hosts: tuple[Host, ...]
    database: str | None = None
    user: str | None = None
    password: str | None = None
    query: tuple[tuple[str, str], ...] = ()  # every other option, in order

    def sqlalchemy(self) -> str:
        """For ``create_async_engine``: the asyncpg dialect, its hosts as ``?host=h:p``."""
        if self._socket() or len(self.hosts) < 2:
            return self.render("postgresql+asyncpg")
        hosts = [("host", h.render(port=True)) for h in self.hosts]
        return self._render("postgresql+asyncpg", self._credentials(), hosts)

    def render(self, scheme: str = "postgresql") -> str:
        """libpq's form, for a raw ``asyncpg.connect`` and libpq's tools: ``h1:p1,h2:p2``."""
        if self._socket():  # a path cannot stand in the authority
            first = [("host", ",".join(h.host for h in self.hosts))]
            if any(h.port for h in self.hosts):
                first.append(("port", ",".join(str(h.port or DEFAULT_PORT) for h in self.hosts)))
            return self._render(scheme, self._credentials(), first)
        return self._render(scheme, self._credentials() + ",".join(h.render() for h in self.hosts), [])

    def _socket(self) -> bool:
        return any(h.host.startswith("/") for h in self.hosts)

    def _credentials(self) -> str:
        if self.user is None:
            return ""
        password = f":{quote(self.password, safe='')}" if self.password is not None else ""
        return f"{quote(self.user, safe='')}{password}@"

    def _render(self, scheme: str, netloc: str, first: list[tuple[str, str]]) -> str:
        query = urlencode(first + list(self.query), safe=":/[],")
        path = quote(self.database, safe="") if self.database else ""
        return f"{scheme}://{netloc}/{path}" + (f"?{query}" if query else "")


def parse_url(url: str) -> DatabaseURL:
    """Read a PostgreSQL URL in either multi-host form (or none: one host, or the default)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"not a PostgreSQL URL (scheme {parts.scheme!r}): expected postgresql://")
    credentials, _, authority = parts.netloc.rpartition("@")
    user, has_password, password = credentials.partition(":")
    options = parse_qsl(parts.query, keep_blank_values=True)
    hosts = [_host(item) for item in authority.split(",") if item]
    named = [value for key, value in options if key == "host"]
    ports = [value for key, value in options if key == "port"]
    for value in named:  # SQLAlchemy's form, and libpq's ?host=h1,h2&port=p1,p2
        hosts += [_host(item) for item in value.split(",") if item]
    if ports and named:
        hosts = _with_ports(hosts, ",".join(ports).split(","))
    query = [(key, value) for key, value in options if key not in ("host", "port") or not named]
    if len(hosts) > 1 and not any(key == PRIMARY_ONLY[0] for key, _ in query):
        query.append(PRIMARY_ONLY)
    return DatabaseURL(
        hosts=tuple(hosts),  # none: the driver's default (PGHOST, else the local socket)
        database=unquote(parts.path.lstrip("/")) or None,
        user=unquote(user) if credentials else None,
        password=unquote(password) if has_password else None,
        query=tuple(query),
    )


def _host(item: str) -> Host:
    item = unquote(item)
    if item.startswith("/"):
        return Host(item)
    if item.startswith("["):
        address, _, rest = item[1:].partition("]")
        return Host(address, int(rest[1:]) if rest.startswith(":") else None)
    name, _, port = item.partition(":")
    return Host(name, int(port) if port else None)


def _with_ports(hosts: list[Host], ports: list[str]) -> list[Host]:
    """libpq's ``port`` list: one port for every host, or one for all."""
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        raise ValueError(f"{len(hosts)} hosts but {len(ports)} ports in the URL")
    return [Host(h.host, int(p)) for h, p in zip(hosts, ports, strict=True)]


def async_url(url: str) -> str:
    """``url`` for SQLAlchemy's asyncpg dialect (see :meth:`DatabaseURL.sqlalchemy`)."""
    return parse_url(url).sqlalchemy()


def asyncpg_dsn(url: str) -> str:
    """``url`` for a raw asyncpg connection (see :meth:`DatabaseURL.render`)."""
    return parse_url(url).render()
