"""The SSRF guard on its own: which URLs pass, with which code the others are refused. No
traffic at all: names resolve through a fake resolver."""

from __future__ import annotations

import ipaddress

import pytest

from app.guards.ssrf import MAX_URL_LENGTH, UrlGuard, UrlRefused, is_forbidden
from tests.webhook_support import FakeResolver

RESOLVER = FakeResolver(
    {
        "hooks.test": ["127.0.0.1"],
        "internal.test": ["127.0.0.2"],
        "public.test": ["93.184.215.14"],
        "mixed.test": ["93.184.215.14", "10.0.0.7"],
        "six.test": ["::1"],
    }
)


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://127.0.0.2:9/", "webhook_url_forbidden"),  # loopback, not the allowed one
        ("http://[::1]:9/", "webhook_url_forbidden"),
        ("http://0.0.0.0:9/", "webhook_url_forbidden"),
        ("http://[::]:9/", "webhook_url_forbidden"),
        ("http://[::ffff:127.0.0.1]:9/", "webhook_url_forbidden"),  # IPv4-mapped
        ("http://[::ffff:10.0.0.1]/", "webhook_url_forbidden"),
        ("http://[::127.0.0.1]/", "webhook_url_forbidden"),  # IPv4-compatible
        ("http://[64:ff9b::a00:1]/", "webhook_url_forbidden"),  # NAT64 of 10.0.0.1
        ("http://[2002:a00:1::]/", "webhook_url_forbidden"),  # 6to4 of 10.0.0.1
        ("http://10.1.2.3/", "webhook_url_forbidden"),
        ("http://192.168.0.1/", "webhook_url_forbidden"),
        ("http://100.64.0.1/", "webhook_url_forbidden"),  # shared address space (CGNAT)
        ("http://169.254.169.254/latest/meta-data/", "webhook_url_forbidden"),  # link-local
        ("http://[fe80::1]/", "webhook_url_forbidden"),
        ("http://[fc00::1]/", "webhook_url_forbidden"),  # unique local
        ("http://224.0.0.1/", "webhook_url_forbidden"),  # multicast
        ("http://[ff02::1]/", "webhook_url_forbidden"),
        ("http://internal.test/", "webhook_url_forbidden"),  # a name resolving to 127.0.0.2
        ("http://mixed.test/", "webhook_url_forbidden"),  # one internal answer is enough
        ("http://six.test/", "webhook_url_forbidden"),
        ("http://nowhere.test/", "webhook_url_unresolvable"),
        ("ftp://127.0.0.1/", "webhook_url_invalid"),
        ("file:///etc/passwd", "webhook_url_invalid"),
        ("gopher://127.0.0.1:6379/", "webhook_url_invalid"),
        ("javascript:alert(1)", "webhook_url_invalid"),
        ("http://user:secret@127.0.0.1/", "webhook_url_invalid"),
        ("http:///path-only", "webhook_url_invalid"),
        ("http://127.0.0.1/" + "a" * MAX_URL_LENGTH, "webhook_url_too_long"),
    ],
)
async def test_refused(url: str, code: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        await UrlGuard(["127.0.0.1"], resolver=RESOLVER).check(url)
    assert refused.value.code == code


async def test_allowed_hosts_and_networks_pass_and_pin_the_checked_address() -> None:
    guard = UrlGuard(["127.0.0.1", "hooks.test", "10.9.0.0/16"], resolver=RESOLVER)
    target = await guard.check("http://hooks.test:8080/x?y=1")
    assert (target.address, str(target.pinned_url)) == ("127.0.0.1", "http://127.0.0.1:8080/x?y=1")
    assert target.url.host == "hooks.test"  # the Host header and SNI keep the name
    assert (await guard.check("http://10.9.3.4/")).address == "10.9.3.4"
    assert (await guard.check("https://public.test/")).address == "93.184.215.14"


async def test_hosts_only_resolves_nothing_outside_the_list() -> None:
    resolver = FakeResolver({"public.test": ["93.184.215.14"]})
    guard = UrlGuard(["127.0.0.1"], hosts_only=True, resolver=resolver)
    for url in ("http://public.test/", "http://93.184.215.14/"):
        with pytest.raises(UrlRefused, match="only reach the allowed hosts") as refused:
            await guard.check(url)
        assert refused.value.code == "webhook_url_forbidden"
    assert resolver.asked == []
    assert (await guard.check("http://127.0.0.1:1/")).address == "127.0.0.1"


@pytest.mark.parametrize(("address", "forbidden"), [("8.8.8.8", False), ("2606:4700::1111", False),
                                                     ("::ffff:8.8.8.8", False), ("127.0.0.1", True),
                                                     ("198.51.100.1", True), ("240.0.0.1", True)])  # fmt: skip
def test_is_forbidden(address: str, forbidden: bool) -> None:
    assert is_forbidden(ipaddress.ip_address(address)) is forbidden
