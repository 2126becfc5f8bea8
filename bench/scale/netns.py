"""Network namespaces as hosts: veth pairs on one bridge, in a switch namespace of their own.

Every namespace gets ``lo`` and an ``eth0`` on 10.77.0.0/24; the bridge lives in its own
namespace, so nothing is added to the machine's own network and deleting the namespaces
removes every link with them. Cutting a host's link (``ip link set eth0 down`` inside it) is the
partition: its packets are dropped, its TCP connections stall as behind a dead switch port.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SUBNET = "10.77.0"


@dataclass(frozen=True, slots=True)
class Host:
    name: str  # the namespace
    address: str

    def exec(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host (``ip netns exec`` keeps the pid: it execs the command)."""
        return ["ip", "netns", "exec", self.name, *argv]


@dataclass
class Topology:
    prefix: str
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def add(self, role: str, octet: int) -> Host:
        host = Host(f"{self.prefix}-{role}", f"{SUBNET}.{octet}")
        index = len(self.hosts)
        _ip("netns", "add", host.name)
        _ip("-n", host.name, "link", "set", "lo", "up")
        # both ends made straight inside their namespaces: no name ever exists in the machine's
        _ip("link", "add", "eth0", "netns", host.name, "type", "veth", "peer", "name", f"p{index}", "netns", self.switch)
        _ip("-n", self.switch, "link", "set", f"p{index}", "master", "br0", "up")
        _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.name, "link", "set", "eth0", "up")
        self.hosts[role] = host
        return host

    def cut(self, role: str) -> None:
        _ip("-n", self.hosts[role].name, "link", "set", "eth0", "down")

    def heal(self, role: str) -> None:
        _ip("-n", self.hosts[role].name, "link", "set", "eth0", "up")


@contextmanager
def topology(roles: list[str]) -> Iterator[Topology]:
    """A switch and one namespace per role (addresses .2, .3, ...), deleted at the end."""
    net = Topology(f"rqs{os.getpid()}")
    try:
        _ip("netns", "add", net.switch)
        _ip("-n", net.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", net.switch, "link", "set", "br0", "up")
        for octet, role in enumerate(roles, start=2):
            net.add(role, octet)
        yield net
    finally:
        for name in [h.name for h in net.hosts.values()] + [net.switch]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
