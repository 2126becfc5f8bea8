"""Which PostgreSQL a command talks to: ``RUNQ_DATABASE_URL``, or the embedded one in the data folder.

The data folder is ``RUNQ_DATA_DIR``, else ``.runq/`` at the project root (the nearest folder
up from the current one that holds ``pyproject.toml`` or ``.git``, else the checkout runq itself
is installed from), so ``cd somewhere && runq stats`` finds the same database as ``make run``.

One embedded server serves a data folder, whoever started it. The process that starts it
records ``{url, pid}`` in ``server.json`` next to ``pgdata/``; every later command (a CLI call,
an extra worker, a second ``runq dev``) finds that record, or a live postmaster in
``postmaster.pid``, and uses that server. Nothing but the owner ever starts or stops it: before
this, a ``runq runs list`` in a second terminal shut the ``runq dev`` server down. A lock file
serialises the decision, so two commands starting at once cannot both start a server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from app.db.postmaster import live_postmaster, server_pids
from app.settings import SECRET_KEY_FILE, Settings

if TYPE_CHECKING:
    from app.db.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)

DATA_FOLDER = ".runq"
PROJECT_MARKERS = ("pyproject.toml", ".git")
RECORD_FILE = "server.json"
LOCK_FILE = "server.lock"
DATABASE = "runq"


class NoDatabase(RuntimeError):
    """There is no database to use, and this command may not create one."""


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """``server.json``: where the embedded server of a data folder listens and who owns it."""

    url: str
    pid: int
    pid_started: int | None  # the owner's start time, so a reused pid is not taken for it
    command: str
    api: str | None = None  # set by `runq dev` once its API is up
    model: str | None = None  # the base URL of `runq dev`'s development model, when it runs one


@dataclass(slots=True)
class Database:
    """The database a command uses, and whether this process owns the embedded server."""

    url: str
    data_dir: Path | None = None
    served_by: ServerRecord | None = None  # another live process's server, which we only use
    server: EmbeddedPostgres | None = None  # ours: started here, stopped when we leave

    @property
    def alive(self) -> bool:
        """False once our own embedded server has exited under us."""
        return self.server is None or self.server.running

    def advertise(self, *, api: str, model: str | None = None) -> None:
        """Add the API's URL to our record, so a second ``runq dev`` can say where we are (and
        the development model's, so a worker started beside us uses it too)."""
        if self.server is not None and self.data_dir is not None:
            record = _read_record(self.data_dir)
            if record is not None and record.pid == os.getpid():
                _write_record(self.data_dir, replace(record, api=api, model=model))


def project_root(start: Path) -> Path | None:
    """The nearest folder from ``start`` upwards that holds a project marker."""
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return None


def data_dir(settings: Settings) -> Path:
    """``RUNQ_DATA_DIR``, or ``.runq/`` at the project root (see the module docstring)."""
    if settings.data_dir:
        return Path(settings.data_dir).expanduser().resolve()
    root = project_root(Path.cwd()) or project_root(Path(__file__).resolve().parents[2])
    if root is None:
        raise NoDatabase(
            "no runq project here: run in your project folder, or set RUNQ_DATA_DIR"
            " (embedded PostgreSQL) or RUNQ_DATABASE_URL"
        )
    return root / DATA_FOLDER


@contextmanager
def database(settings: Settings, *, create: bool = False, command: str = "runq") -> Iterator[str]:
    """The URL of the database to use (see :func:`open_database`)."""
    with open_database(settings, create=create, command=command) as db:
        yield db.url


@contextmanager
def open_database(settings: Settings, *, create: bool = False, command: str) -> Iterator[Database]:
    """Yield the database to use; start (and afterwards stop) the embedded server only when no
    live process serves the data folder. ``create`` allows initialising a new, empty cluster;
    ``command`` names this process in the record."""
    if settings.database_url:
        yield Database(settings.database_url)
        return
    folder = data_dir(settings)
    pgdata = folder / "pgdata"
    if not create and not (pgdata / "PG_VERSION").exists():
        raise NoDatabase(
            f"no database in {folder}: start one with `runq dev` (or `make run`), "
            "or set RUNQ_DATABASE_URL"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        keep_secret_key(folder, settings)
        db = _find_served(folder, pgdata) or _start(folder, pgdata, command)
    try:
        yield db
    finally:
        if db.server is not None:
            with _locked(folder):
                record = _read_record(folder)
                if record is not None and record.pid == os.getpid():  # not a successor's
                    (folder / RECORD_FILE).unlink()
                db.server.stop()


def keep_secret_key(folder: Path, settings: Settings) -> None:
    """Keep this process's made-up development key next to the data (mode 0600), or take the
    one kept there: webhook secrets sealed with it must still open after a restart, in CLI
    commands and in workers started beside ``runq dev``."""
    if not settings._secret_key_generated:
        return  # RUNQ_SECRET_KEY is set, or the key already came from the folder
    path = folder / SECRET_KEY_FILE
    with contextlib.suppress(FileExistsError):  # kept before: take that one
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(settings.secret_key or "")
    settings.secret_key = path.read_text().strip()
    settings._secret_key_generated = False


def advertised_api(settings: Settings) -> str | None:
    """The API URL a live ``runq dev`` of this data folder recorded, if one runs."""
    record = _live_dev_record(settings)
    return record.api if record is not None else None


def advertised_model(settings: Settings) -> str | None:
    """The development model's base URL a live ``runq dev`` of this data folder recorded."""
    record = _live_dev_record(settings)
    return record.model if record is not None else None


def _live_dev_record(settings: Settings) -> ServerRecord | None:
    if settings.database_url:
        return None
    with contextlib.suppress(NoDatabase):
        record = _read_record(data_dir(settings))
        if record is not None and record.api and _alive(record.pid, record.pid_started):
            return record
    return None


def _find_served(folder: Path, pgdata: Path) -> Database | None:
    """The server another live process runs on pgdata, if any."""
    record = _read_record(folder)
    if record is not None and _alive(record.pid, record.pid_started) and server_pids(pgdata):
        return Database(record.url, folder, served_by=record)
    postmaster = live_postmaster(pgdata)
    if postmaster is None:
        return None
    if record is not None and not _alive(record.pid, record.pid_started):
        # Its owner died (the server gets SIGINT then, and is shutting down): a leftover,
        # which EmbeddedPostgres.start() stops before it starts a fresh server.
        return None
    # A server with no record (started by hand, or by an older runq): use it, never stop it.
    pid, port = postmaster
    url = f"postgresql://postgres@127.0.0.1:{port}/{quote(DATABASE, safe='')}"
    return Database(url, folder, served_by=ServerRecord(url, pid, None, "postgres"))


def _start(folder: Path, pgdata: Path, command: str) -> Database:
    from app.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(pgdata, database=DATABASE)
    url = server.start()
    pid = os.getpid()
    _write_record(folder, ServerRecord(url, pid, _started(pid), command))
    log.info("embedded PostgreSQL ready at %s", url)
    return Database(url, folder, server=server)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _read_record(folder: Path) -> ServerRecord | None:
    with contextlib.suppress(OSError, ValueError, TypeError):
        return ServerRecord(**json.loads((folder / RECORD_FILE).read_text()))
    return None


def _write_record(folder: Path, record: ServerRecord) -> None:
    staging = folder / f".{RECORD_FILE}.{os.getpid()}"
    staging.write_text(json.dumps(asdict(record), indent=2) + "\n")
    os.replace(staging, folder / RECORD_FILE)  # readers never see half a file


def _started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    return None


def _alive(pid: int, started: int | None) -> bool:
    now = _started(pid)
    return now is not None and (started is None or now == started)

