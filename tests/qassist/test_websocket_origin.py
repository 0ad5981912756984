"""The websocket accepts only the page's own origin: scheme, host and port."""

from __future__ import annotations

from typing import Any

import pytest
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.testing import WebsocketCommunicator
from pytest_django import Settings

from qassist.websocket import SameOriginValidator

# Channels consumers close stale database connections on each event.
pytestmark = pytest.mark.django_db(transaction=True)


class Accepting(AsyncWebsocketConsumer):  # type: ignore[misc]
    async def connect(self) -> None:
        await self.accept()


async def connects(
    origin: str | None, host: str | None = "127.0.0.1:8000", *, scheme: str = "ws", **extra: str
) -> bool:
    headers = []
    if host is not None:
        headers.append((b"host", host.encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    app: Any = SameOriginValidator(Accepting.as_asgi())
    socket = WebsocketCommunicator(app, "/ws/chat/", headers=headers)
    socket.scope["scheme"] = scheme
    connected, _ = await socket.connect(timeout=5)
    if connected:
        await socket.disconnect()
    return bool(connected)


async def test_the_sites_own_origin_is_accepted() -> None:
    assert await connects("http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another port: another site
        "https://127.0.0.1",  # another scheme and port
        "http://localhost:3000",  # a local dev server
        "http://127.0.0.1",  # port 80 is not 8000
        "https://127.0.0.1:8000",  # the right port, the wrong scheme
        "http://evil.example:8000",
        "null",  # sandboxed iframes and file: pages
        "http://127.0.0.1:8000/path",
    ],
)
async def test_any_other_origin_is_refused(origin: str) -> None:
    assert not await connects(origin)


async def test_a_connection_without_origin_or_host_is_refused() -> None:
    assert not await connects(None)
    assert not await connects("http://127.0.0.1:8000", host=None)


async def test_a_host_outside_allowed_hosts_is_refused_even_when_origin_matches() -> None:
    assert not await connects("http://evil.example:8000", host="evil.example:8000")


async def test_default_ports_match_an_origin_without_a_port(settings: Settings) -> None:
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    assert await connects("http://chat.example.com", host="chat.example.com")
    assert await connects("https://chat.example.com", host="chat.example.com", scheme="wss")
    assert not await connects("http://chat.example.com", host="chat.example.com", scheme="wss")


async def test_behind_a_tls_proxy_the_https_origin_is_accepted(settings: Settings) -> None:
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = {"x-forwarded-proto": "https"}
    assert await connects("https://chat.example.com", host="chat.example.com", **proxied)
    assert not await connects("http://chat.example.com", host="chat.example.com", **proxied)
    # Without the setting the header is not believed: a client could send it.
    settings.SECURE_PROXY_SSL_HEADER = None
    assert not await connects("https://chat.example.com", host="chat.example.com", **proxied)


async def test_a_proxy_that_rewrites_the_host_is_covered_by_csrf_trusted_origins(
    settings: Settings,
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com", "https://*.corp.example"]
    assert await connects("https://chat.example.com", host="127.0.0.1:8000")
    assert await connects("https://eu.corp.example", host="127.0.0.1:8000")
    assert not await connects("http://chat.example.com", host="127.0.0.1:8000")
    assert not await connects("https://chat.example.com:8443", host="127.0.0.1:8000")
    assert not await connects("https://corp.example.evil", host="127.0.0.1:8000")
