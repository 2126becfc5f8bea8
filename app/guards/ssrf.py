"""The SSRF guard for webhook URLs: which URLs runq may call, and at which address.

A webhook URL comes from a tenant, and the worker that calls it sits inside the operator's
network: unguarded, it is a way to reach the metadata service, the database or an admin port.
A URL is checked when a run or schedule is created (the tenant learns at once) and again
before every delivery, because DNS can change in between. A delivery then connects to the very
address that was checked (:attr:`Target.address`), so a second lookup cannot swap it for an
internal one (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from app.errors import Refused

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 5.0
# NAT64 (RFC 6052) counts as global, but its low 32 bits are an IPv4 address it reaches.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


class UrlRefused(Refused):
    """A webhook URL runq will not call."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL and the address to connect to."""

    url: httpx.URL
    address: str

    @property
    def pinned_url(self) -> httpx.URL:
        """The URL with its host replaced by the checked address (``Host`` and SNI keep the name)."""
        return self.url.copy_with(host=self.address)


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, through the event loop's getaddrinfo."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form reaches: mapped, 6to4, NAT64 or the old IPv4-compatible."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or int(ip) >> 32 == 0:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_forbidden(ip: IPAddress) -> bool:
    """Loopback, private, link-local, multicast, unspecified, reserved, shared (CGNAT) and
    documentation ranges, in any IPv6 form that embeds one: everything not globally routable."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return is_forbidden(embedded)
    return not ip.is_global or ip.is_multicast


def _parse_ip(value: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


class UrlGuard:
    """Checks webhook URLs against the rules above and ``RUNQ_WEBHOOK_ALLOW_HOSTS``.

    ``allow`` holds host names and addresses or CIDRs that may be reached although they are
    not public (development, tests); with ``hosts_only`` nothing else is allowed, and no other
    name is even resolved. ``resolver`` is injectable so that tests can map a name to an
    address without DNS.
    """

    def __init__(
        self, allow: Sequence[str] = (), *, hosts_only: bool = False, resolver: Resolver = system_resolver
    ) -> None:
        self._names: set[str] = set()
        self._networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in allow:
            try:
                self._networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                self._names.add(entry.lower().rstrip("."))
        self._hosts_only = hosts_only
        self._resolve = resolver

    def parse(self, url: str) -> httpx.URL:
        """The URL if its form is acceptable (scheme, length, host, no credentials)."""
        if len(url) > MAX_URL_LENGTH:
            raise UrlRefused("webhook_url_too_long", f"webhook URLs are at most {MAX_URL_LENGTH} characters")
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise UrlRefused("webhook_url_invalid", f"not a valid URL: {exc}") from exc
        if parsed.scheme not in ("http", "https"):
            raise UrlRefused("webhook_url_invalid", "webhook URLs must be http or https")
        if not parsed.host:
            raise UrlRefused("webhook_url_invalid", "the webhook URL has no host")
        if parsed.userinfo:
            # Credentials would be stored and logged with the URL; sign-and-verify replaces them.
            raise UrlRefused("webhook_url_invalid", "webhook URLs must not carry credentials")
        return parsed

    def _allowed(self, ip: IPAddress) -> bool:
        return any(ip in network for network in self._networks)

    async def check(self, url: str) -> Target:
        """The URL and the address to call, or :class:`UrlRefused`."""
        parsed = self.parse(url)
        host = parsed.host.lower().rstrip(".")
        named = host in self._names
        literal = _parse_ip(host)
        if literal is not None:
            addresses = [host]
        elif self._hosts_only and not named:
            raise UrlRefused("webhook_url_forbidden", f"webhooks may only reach the allowed hosts, not {host}")
        else:
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    addresses = await self._resolve(parsed.raw_host.decode("ascii"), port)
            except (OSError, TimeoutError, UnicodeError) as exc:
                raise UrlRefused("webhook_url_unresolvable", f"the host {host} does not resolve") from exc
            if not addresses:
                raise UrlRefused("webhook_url_unresolvable", f"the host {host} does not resolve")
        for address in addresses:
            ip = _parse_ip(address.split("%")[0])
            if ip is None:
                raise UrlRefused("webhook_url_unresolvable", f"the host {host} resolves to {address!r}")
            # Every address must pass: a name with one public and one internal answer is refused.
            if named or self._allowed(ip):
                continue
            if self._hosts_only:
                raise UrlRefused("webhook_url_forbidden", f"webhooks may only reach the allowed hosts, not {host}")
            if is_forbidden(ip):
                raise UrlRefused(
                    "webhook_url_forbidden",
                    f"webhooks may not reach {host} ({ip}): loopback, private and other internal"
                    " addresses are refused",
                )
        return Target(url=parsed, address=addresses[0].split("%")[0])
