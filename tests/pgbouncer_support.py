"""A real PgBouncer (the Debian package, 1.18 on bookworm) in transaction mode in front of the
test PostgreSQL: installed when missing, configured in a temp dir, on a free 127.0.0.1 port.

``RUNQ_TEST_PGBOUNCER=1`` routes the suite's database through it (tests/conftest.py): runq's
pools go through the pooler with ``RUNQ_DB_PREPARED_STATEMENTS=false``, while LISTEN, the
migrations and the tests' own raw sessions go to PostgreSQL directly, as in production.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from sqlalchemy.engine import make_url

ENABLED = os.environ.get("RUNQ_TEST_PGBOUNCER") == "1"
# Server connections per (database, user): enough for the transactions the suite runs at once
# (an API process, a few workers, the tests' engine), far fewer than their client connections.
POOL_SIZE = 20


def pgbouncer_binary() -> str:
    """The pgbouncer executable, installing Debian's package first when it is missing."""
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("pgbouncer is not installed (Debian: apt-get install -y pgbouncer)")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", "pgbouncer"], check=True, env=env, capture_output=True)
    return "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """``with PgBouncer(server_url) as bouncer: bouncer.url(database)``; stopped on exit."""

    def __init__(self, server_url: str, *, pool_size: int = POOL_SIZE) -> None:
        self._upstream = make_url(server_url)
        self._pool_size = pool_size
        self.port = _free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="runq-pgbouncer-", dir="/tmp"))
        self._log = self._dir / "pgbouncer.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        """The URL of ``database`` through the pooler (same user and password as upstream)."""
        return self._upstream.set(host="127.0.0.1", port=self.port, database=database).render_as_string(
            hide_password=False
        )

    def __enter__(self) -> PgBouncer:
        user = self._upstream.username or "postgres"
        ini = self._dir / "pgbouncer.ini"
        (self._dir / "userlist.txt").write_text(f'"{user}" "{self._upstream.password or ""}"\n')
        ini.write_text(
            "[databases]\n"
            # every database name the suite creates, on the test server
            f"* = host={self._upstream.host or '127.0.0.1'} port={self._upstream.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "pool_mode = transaction\n"
            # `psql -p <port> -U <user> pgbouncer -c 'SHOW POOLS'` while a test hangs
            f"admin_users = {user}\n"
            # after a failed server login (PostgreSQL restarting) retry in 1 s, not 15
            "server_login_retry = 1\n"
            f"default_pool_size = {self._pool_size}\nmax_client_conn = 2000\n"
            f"auth_type = trust\nauth_file = {self._dir / 'userlist.txt'}\n"
        )
        self._dir.chmod(0o755)
        for path in self._dir.iterdir():
            path.chmod(0o644)
        as_user = {}
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            nobody = pwd.getpwnam("nobody")
            as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            os.chown(self._dir, nobody.pw_uid, nobody.pw_gid)
        # pgbouncer logs every login and close to stderr: into a file, never a pipe nobody reads
        # (once its 64 KiB fill up, pgbouncer blocks on the write and every client with it).
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(
                [pgbouncer_binary(), str(ini)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                **as_user,  # type: ignore[arg-type]
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self._proc.returncode}: {self.log_tail()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{self.port}: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self._log.read_text().splitlines()[-lines:]) if self._log.exists() else ""

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
