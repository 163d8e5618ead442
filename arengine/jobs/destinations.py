"""Where a webhook may be sent: the guard against server-side request forgery.

A client aims the server's outbound POST, so the URL is checked twice: when the job is created
(a 422 `callback_url_refused` naming the rule) and again at each delivery, on the addresses the
name resolves to then; the delivery connects to an address that passed, never resolves again, so
a name rebound to an internal address after the check (DNS rebinding) is not reached.

>>> allow = Allowlist.parse("127.0.0.1")
>>> [str(a) for a in allowed_addresses(parse_url("http://127.0.0.1:9/hook"), allow)]
['127.0.0.1']
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Never
from urllib.parse import urlsplit

from arengine.errors import ErrorCode, InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[IPAddress]]

MAX_URL_LENGTH = 2048
"""The longest callback URL accepted."""

METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
"""Cloud instance metadata services (AWS, GCP, Azure, OpenStack; AWS's IPv6 one): they hand out
credentials to whoever on the machine asks."""

_SHARED = ipaddress.ip_network("100.64.0.0/10")
"""Carrier-grade NAT (RFC 6598): a provider's internal network."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked callback URL's parts."""

    url: str
    scheme: str
    host: str
    """The name or address (IPv6 without brackets), lower case."""
    port: int
    path: str
    """The path and query sent in the request line."""

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Allowlist:
    """`webhook_allowed_hosts`: name patterns, and networks whose addresses are allowed even
    where they are internal. Unset: any name, public addresses only."""

    names: tuple[str, ...]
    networks: tuple[IPNetwork, ...]
    restricted: bool
    """Whether the setting was given (then a host must match an entry)."""

    @classmethod
    def parse(cls, value: str | None) -> Allowlist:
        """The setting's entries; a network is `10.0.0.0/8` or one address.

        >>> Allowlist.parse("*.example.com, 10.0.0.0/8").networks
        (IPv4Network('10.0.0.0/8'),)
        """
        if value is None:
            return cls((), (), restricted=False)
        names: list[str] = []
        networks: list[IPNetwork] = []
        for entry in (part.strip().lower() for part in value.split(",")):
            if not entry:
                raise ValueError("webhook_allowed_hosts has an empty entry")
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.append(entry)
        return cls(tuple(names), tuple(networks), restricted=True)

    def names_host(self, host: str) -> bool:
        """Whether `host` (a name or an address literal) matches an entry."""
        address = _literal(host)
        if address is not None:
            return self.holds(address) or host in self.names
        return any(_matches(pattern, host) for pattern in self.names)

    def holds(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


def parse_url(url: str) -> Target:
    """`url`'s parts, or a 422 naming what is wrong with it (scheme, host, port, credentials).

    >>> parse_url("https://Hooks.Example.com/a?b=1").path
    '/a?b=1'
    """
    if len(url) > MAX_URL_LENGTH:
        _refuse(f"callback_url is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        _refuse(f"callback_url is not a URL ({error})")
    if parts.scheme not in ("http", "https"):
        _refuse(f"callback_url must be http:// or https://, not {parts.scheme or 'none'}://")
    if not parts.hostname:
        _refuse("callback_url names no host")
    if parts.username is not None or parts.password is not None:
        _refuse("callback_url must not hold credentials: the signature authenticates the server")
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        _refuse("callback_url has a space or a control character")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if parts.scheme == "https" else 80
    return Target(url, parts.scheme, parts.hostname.lower(), port or default, path)


def address_rule(address: IPAddress) -> str | None:
    """Why `address` may not be reached unless allowed (the rule's name); None for a public one.

    >>> [address_rule(ipaddress.ip_address(a)) for a in ("169.254.169.254", "8.8.8.8")]
    ['a cloud metadata address', None]
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_rule(address.ipv4_mapped)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address in _SHARED, "a shared (CGNAT) address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "a reserved address"),
    )
    return next((rule for failed, rule in checks if failed), None)


def allowed_addresses(
    target: Target, allow: Allowlist, resolve: Resolver | None = None
) -> tuple[IPAddress, ...]:
    """The addresses of `target`'s host that it may be sent to (at least one), or a 422 naming
    the rule that refused it: the host not in `allow`, no address, or only internal ones."""
    if allow.restricted and not allow.names_host(target.host):
        _refuse(f"callback_url's host {target.host} is not in webhook_allowed_hosts")
    literal = _literal(target.host)
    if literal is not None:
        addresses: Sequence[IPAddress] = [literal]
    else:
        addresses = (resolve or resolve_host)(target.host, target.port)
    if not addresses:
        _refuse(f"callback_url's host {target.host} has no address")
    passed = tuple(a for a in addresses if address_rule(a) is None or allow.holds(a))
    if not passed:
        first = addresses[0]
        _refuse(
            f"callback_url's host {target.host} resolves to {first}, {address_rule(first)}: "
            "refused unless webhook_allowed_hosts holds it"
        )
    return passed


def resolve_host(host: str, port: int) -> list[IPAddress]:
    """`host`'s addresses; a 422 if it has none."""
    try:
        return lookup(host, port)
    except (OSError, UnicodeError) as error:
        _refuse(f"callback_url's host {host} does not resolve ({error})")


def lookup(host: str, port: int) -> list[IPAddress]:
    """`host`'s addresses, IPv4 and IPv6, in the resolver's order (`OSError` when it fails)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: dict[IPAddress, None] = {}
    for info in infos:
        # A scope (fe80::1%eth0) is not part of the address.
        found[ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])] = None
    return list(found)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _matches(pattern: str, host: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _refuse(message: str) -> Never:
    raise InvalidInput(message, code=ErrorCode.CALLBACK_URL_REFUSED)
