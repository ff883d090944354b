"""Webhook targets: URLs and addresses checked (no SSRF), resolved once, connected to at the checked address.

A host name is resolved when a subscription is added and again for every connection delivery opens;
every address it resolves to must be public (or in subscriptions.allowed_networks), and the connection
goes to the address that was checked, so a name that changes its answer between the check and the
connect cannot point delivery at a private service.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from conf.errors import InputError

def check_url(url: str, allowed_hosts: Sequence[str] = (), allowed_networks: Sequence[str] = ()) -> str:
    """Return a webhook URL when it is http(s) with a host, carries no credentials, and its host is allowed.

    A host written as an address (in any notation: 127.0.0.1, 0x7f000001, 2130706433, [::1], ...) must
    be a public one unless `allowed_networks` holds it; host names are checked once resolved
    (`pipelines.subscriptions.targets`).

    Args:
        url: the target URL.
        allowed_hosts: host names (or `*.domain` patterns) targets may use; empty allows any host.
        allowed_networks: private, loopback or link-local networks (CIDR) targets may be in.

    Raises:
        InputError: naming the value and what is wrong with it.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"--url: {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"--url: {url!r} is not an http or https URL")
    if not parts.hostname:
        raise InputError(f"--url: {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise InputError(f"--url: {_without_credentials(url)!r} carries credentials; use --secret-file to sign requests")
    if port == 0:
        raise InputError(f"--url: {url!r} has port 0")
    if allowed_hosts and not host_allowed(parts.hostname, allowed_hosts):
        raise InputError(
            f"--url: host {parts.hostname!r} is not in subscriptions.allowed_hosts ({', '.join(allowed_hosts)})"
        )
    address = address_of(parts.hostname)
    if address is not None:
        check_address(parts.hostname, address, allowed_networks)
    return url


# NAT64 (RFC 6052): an IPv6 address carrying an IPv4 one in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Never public whatever they carry: local-use NAT64 (RFC 8215) translates into the operator's own networks,
# and an IPv4-compatible address (::a.b.c.d, deprecated by RFC 4291) may still reach the IPv4 one.
_NOT_PUBLIC_V6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("::/96"))


def address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a URL host names when it is an address literal, in any notation the C resolver accepts.

    `0x7f000001`, `2130706433`, `0177.0.0.1` and `127.1` all name 127.0.0.1 to inet_aton (and so to
    the HTTP client); a host name gives None.
    """
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def is_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Tell whether `address` is globally routable: not loopback, private, link-local (cloud metadata), reserved."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if any(address in network for network in _NOT_PUBLIC_V6):
            return False
        if address.sixtofour is not None:  # 6to4 (2002::/16): the IPv4 address in bits 16-48
            return is_public_address(address.sixtofour)
    return address.is_global and not address.is_multicast


def check_address(
    host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed_networks: Sequence[str]
) -> None:
    """Refuse a target address that is not public, unless one of `allowed_networks` holds it.

    Raises:
        InputError: naming the host, the address and the setting that would allow it.
    """
    if is_public_address(address):
        return
    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    for network in allowed_networks:
        if plain in ipaddress.ip_network(network, strict=False):
            return
    raise InputError(
        f"--url: host {host!r} is the address {plain}, a loopback, private, link-local or reserved one; "
        "add its network to subscriptions.allowed_networks to allow it"
    )


def _without_credentials(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def host_allowed(host: str, allowed_hosts: Sequence[str]) -> bool:
    """Tell whether `host` matches an allow-list entry: the exact host, or a subdomain of `*.domain`."""
    host = host.lower().rstrip(".")
    for entry in allowed_hosts:
        entry = entry.lower().rstrip(".")
        if entry.startswith("*.") and host.endswith(entry[1:]):
            return True
        if host == entry:
            return True
    return False


# Resolves (host, port) like socket.getaddrinfo.
Resolver = Callable[..., list[Any]]


class UnresolvedError(OSError):
    """A target host that does not resolve now (retried like any connection error)."""


def resolve_target(
    host: str, port: int, allowed_networks: Sequence[str], resolver: Resolver = socket.getaddrinfo
) -> str:
    """Resolve `host` and return the address to connect to, every address it resolves to being allowed.

    Raises:
        InputError: when one of its addresses is not public and not in `allowed_networks`.
        UnresolvedError: when the host does not resolve.
    """
    literal = address_of(host)
    if literal is not None:
        check_address(host, literal, allowed_networks)
        mapped = literal.ipv4_mapped if isinstance(literal, ipaddress.IPv6Address) else None
        return str(mapped or literal)
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnresolvedError(f"{host}: does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise UnresolvedError(f"{host}: resolves to no address")
    for address in addresses:
        check_address(host, ipaddress.ip_address(address.split("%")[0]), allowed_networks)
    return addresses[0]


def check_target(url: str, allowed_networks: Sequence[str], resolver: Resolver = socket.getaddrinfo) -> None:
    """Check a new subscription's URL host: when it resolves now, every address must be allowed.

    A host that does not resolve yet is accepted: delivery resolves and checks it again before each
    connection.

    Raises:
        InputError: when one of its addresses is not public and not in `allowed_networks`.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        resolve_target(parts.hostname or "", port, allowed_networks, resolver)
    except UnresolvedError:
        pass


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to the checked address of its host (the Host header still names the host).

    Args:
        host: the URL's host.
        port: the URL's port.
        allowed_networks: private networks the host may resolve to.
        timeout: connect and read timeout in seconds.
        resolver: resolves the host (socket.getaddrinfo).
    """

    def __init__(
        self,
        host: str,
        port: int | None,
        allowed_networks: Sequence[str],
        timeout: float,
        resolver: Resolver = socket.getaddrinfo,
    ):
        super().__init__(host, port, timeout=timeout)
        self._allowed_networks = tuple(allowed_networks)
        self._resolver = resolver

    def _pinned_socket(self) -> socket.socket:
        # One lookup per connection: the address checked is the address connected to.
        address = resolve_target(self.host, self.port, self._allowed_networks, self._resolver)
        return socket.create_connection((address, self.port), self.timeout)

    def connect(self) -> None:
        self.sock = self._pinned_socket()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """An HTTPS connection to the checked address; the certificate is verified for the host name."""

    default_port = http.client.HTTPS_PORT

    def connect(self) -> None:
        context = ssl.create_default_context()
        self.sock = context.wrap_socket(self._pinned_socket(), server_hostname=self.host)


def pinned_connection(
    url: str, allowed_networks: Sequence[str], timeout: float, resolver: Resolver = socket.getaddrinfo
) -> PinnedHTTPConnection:
    """A keep-alive connection to `url`'s host at a checked address (HTTPS when the URL is https).

    Raises:
        InputError: for a URL without a host.
    """
    parts = urlsplit(url)
    if not parts.hostname:
        raise InputError(f"--url: {url!r} names no host")
    kind = PinnedHTTPSConnection if parts.scheme == "https" else PinnedHTTPConnection
    return kind(parts.hostname, parts.port, allowed_networks, timeout, resolver)
