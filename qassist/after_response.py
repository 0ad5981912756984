"""Cleanups that run when Django's handler is done with a request, its response read or not.

A streaming view of the REST API starts its generation before it returns the response (the
first event decides between an error status and a stream). If the client hangs up after the
view returned and before the handler began reading the response, Django's ASGI handler (5.2)
cancels the request and drops the response unread: `response.close()` is not called on that
path, and the stream's own `finally` never runs, since it never started. The generation would
then run for nobody, its reply left "streaming", until garbage collection found it.

`AfterResponse` wraps the HTTP application: a view registers a cleanup with `after_response`
(the generation's `aclose`), and every registered cleanup runs once the handler returns,
however it ended. Closing a generation the stream already closed does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest

logger = logging.getLogger(__name__)

SCOPE_KEY = "qassist.after_response"

Cleanup = Callable[[], Awaitable[object]]


class AfterResponse:
    """ASGI middleware for HTTP: runs the cleanups views registered, after the inner app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        cleanups: list[Cleanup] = []
        try:
            await self.app({**scope, SCOPE_KEY: cleanups}, receive, send)
        finally:
            for cleanup in cleanups:
                try:
                    await asyncio.shield(cleanup())
                except Exception:
                    logger.exception("a cleanup after a response failed")


def after_response(request: HttpRequest, cleanup: Cleanup) -> bool:
    """Run `cleanup` once Django's handler is done with `request` (False: this request did not
    come through `AfterResponse`, and nothing will run it)."""
    cleanups = getattr(request, "scope", {}).get(SCOPE_KEY)
    if cleanups is None:
        return False
    cleanups.append(cleanup)
    return True
