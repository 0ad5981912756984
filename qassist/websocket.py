"""The websocket's Origin check: scheme, host and port, like Django's CSRF check for forms.

Channels' AllowedHostsOriginValidator compares only the host name with ALLOWED_HOSTS, so a page
on http://127.0.0.1:9999 or http://localhost:3000 (any local dev server, any port) could open a
socket to a site on 127.0.0.1:8000 with the user's cookie. Here a connection is accepted only
when its Origin is the site's own origin — the scheme the browser used (wss behind a TLS proxy
that sets SECURE_PROXY_SSL_HEADER counts as https), the Host header it sent, the port — or is
listed in CSRF_TRUSTED_ORIGINS (for a proxy that rewrites the Host header). The Host itself
must be in ALLOWED_HOSTS.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            try:
                return str(value.decode("latin1"))
            except UnicodeDecodeError:
                return None
    return None


def _normalise(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, with the scheme's default port filled in."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def request_scheme(scope: Scope) -> str:
    """http or https as the browser sees it: wss to daphne, or https at the TLS proxy."""
    if scope.get("scheme") == "wss":
        return "https"
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        meta_name, secure_value = proxy_header
        header = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin1")
        value = _header(scope, header)
        if value is not None and value.split(",")[0].strip() == secure_value:
            return "https"
    return "http"


def _trusted(origin: tuple[str, str, int]) -> bool:
    """Listed in CSRF_TRUSTED_ORIGINS, wildcard subdomains (https://*.example.com) included."""
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "*" not in entry:
            if _normalise(entry) == origin:
                return True
            continue
        trusted = urlsplit(entry.lower())
        domain, trusted_port = split_domain_port(trusted.netloc.replace("*", "", 1))
        wanted_port = int(trusted_port) if trusted_port else DEFAULT_PORTS.get(trusted.scheme)
        if trusted.scheme == scheme and port == wanted_port and is_same_domain(host, domain):
            return True
    return False


def origin_allowed(scope: Scope) -> bool:
    origin_text = _header(scope, b"origin")
    host_header = _header(scope, b"host")
    origin = _normalise(origin_text) if origin_text else None
    if origin is None:
        return False
    if _trusted(origin):
        return True
    if not host_header:
        return False
    domain, _port = split_domain_port(host_header)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    own = _normalise(f"{request_scheme(scope)}://{host_header}")
    return own is not None and own == origin


class SameOriginValidator:
    """ASGI middleware for websockets: deny (close 403) any connection from another origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator is for websocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        logger.warning(
            "websocket from origin %r refused for host %r",
            _header(scope, b"origin"),
            _header(scope, b"host"),
        )
        return await WebsocketDenier()(scope, receive, send)
