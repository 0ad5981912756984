"""What the website and WebDAV connectors share: httpx (already qassist's HTTP client, and
webdav4's), addresses checked before each request, bodies streamed and cut at a limit (a 10 GB
file is never downloaded), and a pace between requests."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from sources.connectors import ItemError, SourceError, human

USER_AGENT = "qassist-sync/1.0 (company knowledge; +https://github.com/qassist)"
TIMEOUT = httpx.Timeout(20.0, connect=10.0)
CHUNK = 64 * 1024


def blocked_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [
        ipaddress.ip_network(n.strip(), strict=False)
        for n in settings.QASSIST_SOURCE_BLOCKED_NETWORKS
        if n.strip()
    ]


def check_url(url: str) -> None:
    """SourceError unless `url` is http(s) to a host whose addresses may be reached: the
    networks of QASSIST_SOURCE_BLOCKED_NETWORKS (by default the link-local ones, where cloud
    machines answer with their credentials) are refused, every redirect included."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceError(f"“{url}” is not an http:// or https:// address.")
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise SourceError(f"{parts.hostname} cannot be found ({exc}).") from None
    blocked = blocked_networks()
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if any(address in network for network in blocked):
            raise SourceError(
                f"{parts.hostname} is at {address}, in a network this server may not reach for "
                "sources (QASSIST_SOURCE_BLOCKED_NETWORKS)."
            )


def read_body(response: httpx.Response, limit: int) -> bytes:
    """The body of a streamed response, never more than `limit` bytes read: a larger one (by
    its Content-Length, or as it comes) is an ItemError."""
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ItemError(
            f"The file is {human(int(declared))}; a document may be at most {human(limit)} "
            "(QASSIST_KNOWLEDGE_MAX_FILE_MB). It was not downloaded."
        )
    parts: list[bytes] = []
    read = 0
    for chunk in response.iter_bytes(CHUNK):
        read += len(chunk)
        if read > limit:
            raise ItemError(
                f"The file is larger than {human(limit)}, the most a document may be "
                "(QASSIST_KNOWLEDGE_MAX_FILE_MB); the download was stopped there."
            )
        parts.append(chunk)
    return b"".join(parts)


def unreachable(url: str, exc: Exception) -> SourceError:
    host = urlsplit(url).netloc
    if isinstance(exc, httpx.TimeoutException):
        return SourceError(f"{host} did not answer in time ({type(exc).__name__}).")
    if isinstance(exc, httpx.TooManyRedirects):
        return SourceError(f"{url} redirects in a loop (or more than 10 times).")
    return SourceError(f"{host} cannot be reached: {exc}.")


class Pace:
    """At least `delay` seconds between the starts of two requests, whatever the threads."""

    def __init__(self, delay: float) -> None:
        self.delay = max(0.0, delay)
        self._next = 0.0
        self._lock = threading.Lock()

    def slow_to(self, delay: float) -> None:
        """At least `delay` from now on, the request just made included."""
        with self._lock:
            if delay > self.delay:
                self._next += delay - self.delay
                self.delay = delay

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.delay
        if start > now:
            time.sleep(start - now)
