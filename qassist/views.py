"""`GET /healthz`: is every part qassist needs answering? For load balancers and people.

200 when the database, Redis (when configured) and an inference worker answer; 503 otherwise,
with `down` naming the parts that did not. Each probe has a timeout and turns any failure into
a JSON field, so the endpoint neither hangs nor shows a traceback.

Anyone may ask, so an anonymous caller hears only the status and which part is down. The
details (error text, hosts, the model, each worker's counters) go to staff, and to callers on
this machine that did not come through a proxy (a local load balancer, `curl` on the host).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, cast

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFilesSent
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from inference.service import get_engine_client
from qassist.callers import is_local_caller
from qassist.errors import error_response
from qassist.middleware import DATABASE_ERRORS, database_unavailable

DATABASE_TIMEOUT = 2.0
REDIS_TIMEOUT = 1.0
ENGINE_TIMEOUT = 2.0

Part = dict[str, Any]


@never_cache
@require_safe
async def healthz(request: HttpRequest) -> JsonResponse:
    database, redis_part, engine = await asyncio.gather(
        _database(), _redis(), _engine(), return_exceptions=False
    )
    parts = {"database": database, "redis": redis_part, "engine": engine}
    down = [name for name, part in parts.items() if part.get("ok") is False]
    body: dict[str, Any] = {"status": "degraded" if down else "ok", "down": down}
    if await _may_see_details(request):
        body.update(parts, model=settings.QASSIST_MODEL)
    else:
        body.update({name: _public(part) for name, part in parts.items()})
    return JsonResponse(body, status=503 if down else 200)


async def _may_see_details(request: HttpRequest) -> bool:
    if is_local_caller(request):  # not through a proxy: see qassist/callers.py
        return True
    try:
        user = await request.auser()
    except Exception:  # the database (sessions, users) may be the part that is down
        return False
    return bool(user.is_active and user.is_staff)


def _public(part: Part) -> Part:
    return {key: part[key] for key in ("ok", "mode") if key in part}


def _failure(exc: BaseException, timeout: float) -> Part:
    if isinstance(exc, TimeoutError):
        return {"ok": False, "error": f"no answer within {timeout:g} s"}
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()}


def _select_one() -> Part:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"ok": True, "vendor": connection.vendor}


async def _database() -> Part:
    try:
        return await asyncio.wait_for(sync_to_async(_select_one)(), DATABASE_TIMEOUT)
    except Exception as exc:
        return _failure(exc, DATABASE_TIMEOUT)


async def _redis() -> Part:
    if not settings.REDIS_URL:
        return {"mode": "embedded"}
    try:
        client = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
        )
    except Exception as exc:  # a malformed URL; the system check qassist.E003 says more
        return _failure(exc, REDIS_TIMEOUT)
    try:
        # redis-py types ping() for its sync and async clients at once.
        await asyncio.wait_for(cast(Awaitable[bool], client.ping()), REDIS_TIMEOUT)
    except Exception as exc:
        return _failure(exc, REDIS_TIMEOUT)
    finally:
        await client.aclose()
    return {"ok": True}


async def _engine() -> Part:
    try:
        health = await asyncio.wait_for(get_engine_client().health(), ENGINE_TIMEOUT)
    except Exception as exc:
        return _failure(exc, ENGINE_TIMEOUT)
    return engine_verdict(health)


def engine_verdict(health: Any) -> Part:
    """The engine's health report as /healthz judges it (the admin's home shows the same
    verdict): ok only when it says so and not every engine is stuck in one step."""
    if not isinstance(health, dict):
        return {"ok": False, "error": f"unexpected health report: {health!r}"}
    part = {**health, "ok": bool(health.get("ok"))}
    workers = [w for w in health.get("workers") or [] if isinstance(w, dict)]
    if workers and all(w.get("stalled") for w in workers):
        # The watchdog: every engine has been in one step past QASSIST_ENGINE_STALL_SECONDS,
        # so no reply moves (issue #32: /healthz said "ok" through a 24-minute stall).
        longest = max(float(w.get("step_running_seconds") or 0) for w in workers)
        part.update(ok=False, error=f"the engine has been in one step for {longest:.0f} s")
    return part


# --- error handlers (qassist/urls.py): JSON for JSON callers, a page for people ---------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        # A form or JSON body over DATA_UPLOAD_MAX_MEMORY_SIZE (the REST API bounds its own
        # bodies per endpoint and never gets here).
        return error_response(
            request,
            status=413,
            code="request_too_large",
            message="The request is too large: send less at a time.",
            template="413.html",
        )
    if isinstance(exception, TooManyFilesSent):  # e.g. a folder's worth of documents at once
        message = (
            "Too many files in one upload: at most "
            f"{settings.DATA_UPLOAD_MAX_NUMBER_FILES} at a time. Go back and send them in "
            "smaller groups."
        )
        return error_response(
            request,
            status=400,
            code="too_many_files",
            message=message,
            template="400.html",
            detail=message,
        )
    return error_response(
        request,
        status=400,
        code="bad_request",
        message="The request was malformed.",
        template="400.html",
    )


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(
        request,
        status=403,
        code="forbidden",
        message="You may not do that.",
        template="403.html",
    )


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(
        request, status=404, code="not_found", message="Not found.", template="404.html"
    )


def server_error(request: HttpRequest) -> HttpResponse:
    # Called while the exception is being handled: a database outage raised outside a view
    # (in a middleware) is still a 503, not a 500.
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_ERRORS):
        return database_unavailable(request, exc)
    return error_response(
        request,
        status=500,
        code="internal",
        message="The server could not complete this request.",
        template="500.html",
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return error_response(
        request,
        status=403,
        code="csrf_failed",
        message="The form expired or came from another site; reload the page and try again.",
        template="403.html",
    )
