"""Middleware for every HTTP answer: a 503 instead of a traceback when the database is down,
and the Content-Security-Policy on every HTML page (chat, login, admin, error pages)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import DisallowedHost
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from qassist.errors import error_response

logger = logging.getLogger("qassist.database")

DATABASE_ERRORS = (OperationalError, InterfaceError)
RETRY_AFTER_SECONDS = 5


def database_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    logger.warning(
        "database unavailable for %s %s: %s",
        request.method,
        request.path,
        f"{type(exc).__name__}: {exc}".strip().splitlines()[0],
    )
    return error_response(
        request,
        status=503,
        code="database_unavailable",
        message="The database is not answering; try again in a few seconds.",
        template="503.html",
        retry_after=RETRY_AFTER_SECONDS,
    )


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """A view that cannot reach the database answers 503 with a clear page or JSON and one log
    line. Nothing needs resetting afterwards: Django drops a broken connection at the end of
    the request, and the next request connects afresh."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_ERRORS):
            return database_unavailable(request, exception)
        return None


def content_security_policy(request: HttpRequest) -> str:
    """No inline script, no foreign origin: model output that slipped past the sanitiser still
    could not run or load anything. Websockets: ws: on plain HTTP, wss: only under HTTPS."""
    scheme = "wss" if request.is_secure() else "ws"
    try:
        connect = f"'self' {scheme}://{request.get_host()}"
    except DisallowedHost:  # answered 400 anyway
        connect = "'self'"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"font-src 'self'; connect-src {connect}; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


class ContentSecurityPolicyMiddleware:
    """Adds the policy to every response that has none. Sync and async alike, so an async
    request (the streaming API, daphne) does not hop to a thread just for a header."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        response = self.get_response(request)
        return self._apply(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        response = await self.get_response(request)
        return self._apply(request, response)

    @staticmethod
    def _apply(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        response.headers.setdefault("Content-Security-Policy", content_security_policy(request))
        return response
