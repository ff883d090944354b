"""Webhook targets resolved once, checked, and connected to at the checked address (no DNS rebinding).

A host name is resolved when a subscription is added and again for every connection delivery opens;
every address it resolves to must be public (or in subscriptions.allowed_networks), and the connection
goes to the address that was checked, so a name that changes its answer between the check and the
connect cannot point delivery at a private service.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from conf.errors import InputError
from gold.subscriptions import address_of, check_address

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
