"""The webhook SSRF guard: URLs, address rules, the allowlist, and names resolving inward."""

from __future__ import annotations

import ipaddress

import pytest

from arengine.errors import ArengineError, ErrorCode
from arengine.jobs.destinations import (
    Allowlist,
    IPAddress,
    address_rule,
    allowed_addresses,
    parse_url,
    resolve_host,
)

PUBLIC = Allowlist.parse(None)


def _refused(url: str, allow: Allowlist = PUBLIC, *resolved: str) -> str:
    def resolve(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(a) for a in resolved]

    with pytest.raises(ArengineError) as caught:
        allowed_addresses(parse_url(url), allow, resolve)
    assert caught.value.code is ErrorCode.CALLBACK_URL_REFUSED
    assert caught.value.code.status == 422
    return caught.value.message


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("100.64.0.1", "CGNAT"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
    ],
)
def test_internal_addresses_are_refused_naming_their_rule(address: str, rule: str) -> None:
    host = f"[{address}]" if ":" in address else address
    message = _refused(f"http://{host}/hook")
    assert rule in message and address in message


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert address_rule(ipaddress.ip_address(address)) is None


def test_a_name_resolving_to_loopback_is_refused_unless_a_network_allows_it() -> None:
    message = _refused("http://hooks.example.com/x", PUBLIC, "127.0.0.1")
    assert "hooks.example.com resolves to 127.0.0.1, a loopback address" in message
    allow = Allowlist.parse("hooks.example.com,127.0.0.0/8")
    found = allowed_addresses(
        parse_url("http://hooks.example.com/x"),
        allow,
        lambda h, p: [ipaddress.ip_address("127.0.0.1")],
    )
    assert found == (ipaddress.ip_address("127.0.0.1"),)


def test_localhost_really_resolves_inward_and_is_refused() -> None:
    with pytest.raises(ArengineError, match="loopback"):
        allowed_addresses(parse_url("http://localhost:9/hook"), PUBLIC, resolve_host)


def test_only_the_addresses_that_pass_are_kept() -> None:
    """A name with a public and an internal address: only the public one may be connected to."""
    found = allowed_addresses(
        parse_url("https://mixed.example.com/"),
        PUBLIC,
        lambda h, p: [ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("8.8.8.8")],
    )
    assert found == (ipaddress.ip_address("8.8.8.8"),)


def test_a_restricted_allowlist_names_the_hosts() -> None:
    allow = Allowlist.parse("*.example.com, exact.org")
    public = ["93.184.216.34"]
    assert "not in webhook_allowed_hosts" in _refused("http://evil.net/", allow, *public)
    assert "not in webhook_allowed_hosts" in _refused(
        "http://example.com.evil.net/", allow, *public
    )
    for url in ("http://a.example.com/", "http://b.a.example.com/", "http://exact.org/"):
        found = allowed_addresses(
            parse_url(url), allow, lambda h, p: [ipaddress.ip_address(public[0])]
        )
        assert [str(a) for a in found] == public
    # Naming an internal host is not enough: its addresses need a network entry.
    assert "private" in _refused("http://intranet.example.com/", allow, "10.1.2.3")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://example.com/", "http:// or https://"),
        ("http:///path", "no host"),
        ("http://user:pass@example.com/", "credentials"),
        ("http://example.com:99999/", "not a URL"),
        ("http://example.com/a b", "space or a control"),
        ("http://example.com/" + "a" * 2100, "longer than"),
    ],
)
def test_malformed_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(ArengineError, match=why) as caught:
        parse_url(url)
    assert caught.value.code is ErrorCode.CALLBACK_URL_REFUSED


def test_the_request_line_and_host_header() -> None:
    target = parse_url("https://Hooks.Example.com:8443/in?x=1")
    assert (target.host, target.port, target.path) == ("hooks.example.com", 8443, "/in?x=1")
    assert target.host_header == "hooks.example.com:8443"
    assert parse_url("http://[::1]/").host_header == "[::1]"
