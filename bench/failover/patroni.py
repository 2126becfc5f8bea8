"""A Patroni pair on this machine: one etcd, two PostgreSQL 15 nodes, each under its Patroni.

Debian's packages (``patroni``, ``etcd-server``, PostgreSQL 15's binaries): :func:`install`
fetches what is missing. Everything listens on 127.0.0.1 at free ports, keeps its data in
one temporary folder, and runs as the ``postgres`` user (PostgreSQL refuses root). The
settings are the ones docs/operations.md recommends: ``synchronous_mode`` with
``synchronous_mode_strict``, so a commit is on both nodes before it is acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.server import free_port

PACKAGES = {"patroni": "/usr/bin/patroni", "etcd-server": "/usr/bin/etcd"}
PG_BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"
SCOPE = "runq-failover"
# Patroni's clock: the leader key lives 10 s, each node's loop runs every second, and a DCS
# or PostgreSQL call is retried for 4 s (Patroni wants ttl >= loop_wait + 2 * retry_timeout).
DCS = {"ttl": 10, "loop_wait": 1, "retry_timeout": 4}


def install() -> None:
    """Debian's patroni and etcd-server (and PostgreSQL 15) unless they are here already."""
    missing = [name for name, path in PACKAGES.items() if not Path(path).exists()]
    if not (PG_BIN / "postgres").exists():
        missing.append("postgresql-15")
    if missing:
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    pg_port: int
    rest_port: int
    data_dir: Path
    config: Path


def node_config(node: Node, *, etcd: str, run_dir: Path, synchronous: bool = True) -> dict[str, Any]:
    """Patroni's YAML for one node (pure: tested with the harness's other logic)."""
    local = f"127.0.0.1:{node.pg_port}"
    return {
        "scope": SCOPE,
        "name": node.name,
        "restapi": {"listen": f"127.0.0.1:{node.rest_port}", "connect_address": f"127.0.0.1:{node.rest_port}"},
        "etcd3": {"hosts": [etcd]},
        "bootstrap": {
            "dcs": DCS
            | {
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": synchronous,
                "synchronous_mode_strict": synchronous,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {"wal_log_hints": "on", "max_connections": 200, "hot_standby": "on"},
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            "pg_hba": [
                "local all all trust",
                "host replication all 127.0.0.1/32 trust",
                "host all all 127.0.0.1/32 trust",
            ],
        },
        "postgresql": {
            "listen": local,
            "connect_address": local,
            "data_dir": str(node.data_dir),
            "bin_dir": str(PG_BIN),
            "pgpass": str(run_dir / f"{node.name}.pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "replicator", "password": "replicator"},
                "rewind": {"username": "postgres", "password": "postgres"},
            },
            "parameters": {"unix_socket_directories": str(run_dir), "fsync": "on"},
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


class Pair:
    """etcd and two Patroni nodes; :meth:`kill` a node as a dead host, :meth:`revive` it as its
    supervisor would, :meth:`switchover` as an operator does."""

    def __init__(self, root: Path, *, synchronous: bool = True) -> None:
        self.root = root
        self.synchronous = synchronous
        self.etcd = f"127.0.0.1:{free_port()}"
        self.nodes = [
            Node(name, free_port(), free_port(), root / name, root / f"{name}.yml") for name in ("pg1", "pg2")
        ]
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        for node in self.nodes:
            # JSON is YAML: Patroni reads it as its configuration file.
            config = node_config(node, etcd=self.etcd, run_dir=root, synchronous=synchronous)
            node.config.write_text(json.dumps(config, indent=2))

    @property
    def hosts(self) -> str:
        """``h1:p1,h2:p2``: the host list of runq's URL."""
        return ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)

    def start(self) -> None:
        peer = f"127.0.0.1:{free_port()}"
        self._spawn("etcd", [
            "etcd", "--name", "e1", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", f"http://{self.etcd}", "--advertise-client-urls", f"http://{self.etcd}",
            "--listen-peer-urls", f"http://{peer}", "--initial-advertise-peer-urls", f"http://{peer}",
            "--initial-cluster", f"e1=http://{peer}",
        ])  # fmt: skip
        for node in self.nodes:
            self.revive(node)

    def revive(self, node: Node) -> None:
        self._spawn(node.name, ["patroni", str(node.config)])

    def leader(self) -> Node | None:
        """The node whose Patroni answers ``GET /primary`` with 200 (it holds the leader key
        and runs as primary; not yet proof that it takes writes)."""
        for node in self.nodes:
            url = f"http://127.0.0.1:{node.rest_port}/primary"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return node
        return None

    def standby(self) -> Node | None:
        """The node Patroni lists as the (synchronous, when so configured) standby, running."""
        role = "sync_standby" if self.synchronous else "replica"
        for node in self.nodes:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{node.rest_port}/cluster", timeout=1) as answer:
                    members = json.load(answer)["members"]
                names = {m["name"] for m in members if m.get("role") == role and m.get("state") in ("running", "streaming")}
                return next((n for n in self.nodes if n.name in names), None)
        return None

    def kill(self, node: Node) -> None:
        """SIGKILL the node's Patroni and its postmaster at once: the host is gone."""
        postmaster = _postmaster_pid(node.data_dir)
        proc = self._procs.pop(node.name)
        proc.kill()
        proc.wait()
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)

    def switchover(self, *, to: Node) -> None:
        """``patronictl switchover`` to ``to``, now, without asking."""
        current = self.leader()
        subprocess.run(
            ["patronictl", "-c", str(to.config), "switchover", SCOPE, "--leader", current.name if current else "",
             "--candidate", to.name, "--force"],
            check=True, capture_output=True, user=USER,
        )  # fmt: skip

    def stop(self) -> None:
        """Patroni stops its PostgreSQL on SIGTERM; etcd goes last."""
        for name in [n.name for n in self.nodes] + ["etcd"]:
            proc = self._procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for node in self.nodes:  # a postmaster left behind by a killed Patroni
            pid = _postmaster_pid(node.data_dir)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self._procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, user=USER, group=USER,
            cwd=self.root, env={"PATH": os.environ["PATH"], "HOME": str(self.root), "LC_ALL": "C.UTF-8"},
        )  # fmt: skip
        log.close()


def _postmaster_pid(data_dir: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    return None


@contextlib.contextmanager
def pair(*, synchronous: bool = True) -> Iterator[Pair]:
    """A started pair in a temporary folder owned by ``postgres``; stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="runq-failover-", dir="/tmp"))
    user = pwd.getpwnam(USER)
    os.chown(root, user.pw_uid, user.pw_gid)
    started = Pair(root, synchronous=synchronous)
    for path in root.iterdir():
        os.chown(path, user.pw_uid, user.pw_gid)
    try:
        started.start()
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)

