"""Who is calling: the machine that opened the connection, or a client behind a proxy.

Endpoints that trust callers by address (`/healthz` details, `/metrics`) ask here. A request
that carries a proxy's forwarding headers (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`) is
treated as coming from its forwarded client, whatever its peer: a proxy on this machine connects
from 127.0.0.1, and behind it is anyone on the internet. The forwarded address itself is not
believed either: how many proxies there are, and whether each overwrites or appends the header,
is the deployment's to know, and a client can write any address into a header that a proxy then
passes on. So a proxied request is never "local" and never "in a trusted network"; it is trusted
only through a login (staff). Monitoring that trusts addresses scrapes daphne directly, not
through the proxy (docs/deploy.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.http import HttpRequest

PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def came_through_proxy(request: HttpRequest) -> bool:
    return any(header in request.headers for header in PROXY_HEADERS)


def direct_address(request: HttpRequest) -> Address | None:
    """The peer's address when the peer is the client itself; None when the request came
    through a proxy, or the peer's address is not an IP address (a Unix socket)."""
    if came_through_proxy(request):
        return None
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


def is_local_caller(request: HttpRequest) -> bool:
    """A caller on this machine itself (curl, a local Prometheus), not relayed by a proxy."""
    address = direct_address(request)
    return address is not None and address.is_loopback


def is_in_networks(request: HttpRequest, networks: Iterable[str]) -> bool:
    """A direct caller from one of `networks` (CIDR strings, e.g. "10.0.0.0/8")."""
    address = direct_address(request)
    return address is not None and any(
        address in ipaddress.ip_network(network, strict=False) for network in networks
    )
