"""`GET /metrics` (Prometheus) and the staff status page: the engine's live numbers.

Both read the engine client's health report, which carries every live worker's heartbeat
snapshot (see `inference.metrics`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from inference import metrics
from inference.service import get_engine_client
from qassist.callers import is_in_networks, is_local_caller
from qassist.errors import json_error
from tenants.admin_scope import admin_tenant_slugs

HEALTH_TIMEOUT = 2.0


async def _health() -> dict[str, Any]:
    try:
        health = await asyncio.wait_for(get_engine_client().health(), HEALTH_TIMEOUT)
    except Exception as exc:  # Redis down, engine still loading: metrics say so, no traceback
        return {"ok": False, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    return health if isinstance(health, dict) else {"ok": False, "workers": []}


class _Refused:
    """Not allowed to read the metrics at all."""


REFUSED = _Refused()


def _metrics_scope(request: HttpRequest) -> frozenset[str] | _Refused | None:
    """Whose tenant-labelled series the caller may read: None for every tenant's (the
    monitoring host: a direct caller on this machine or in QASSIST_METRICS_NETWORKS; a
    superuser), a tenant admin's own tenants' slugs, or REFUSED. A request through a proxy is
    its forwarded client, never "local" (qassist/callers.py): it needs a staff login."""
    if is_local_caller(request) or is_in_networks(request, settings.QASSIST_METRICS_NETWORKS):
        return None
    user = getattr(request, "user", None)
    if user is None or not (user.is_active and user.is_staff):
        return REFUSED
    return admin_tenant_slugs(request)


@never_cache
@require_safe
async def metrics_view(request: HttpRequest) -> HttpResponse:
    scope = await sync_to_async(_metrics_scope)(request)
    if isinstance(scope, _Refused):
        return json_error(
            "forbidden",
            "Metrics are for staff and the monitoring host (a direct caller on this machine or "
            "in QASSIST_METRICS_NETWORKS, not through the proxy).",
            status=403,
        )
    health = await _health()
    body = await sync_to_async(metrics.render)(health, tenants=scope)
    return HttpResponse(body, content_type=metrics.CONTENT_TYPE)


def _summary(health: dict[str, Any], tenants: frozenset[str] | None) -> dict[str, Any]:
    """The engine page's numbers; refusals only of `tenants` (None: every tenant's)."""
    workers = [w for w in health.get("workers") or [] if isinstance(w, dict)]
    rows = []
    for w in workers:
        steps_seconds = float(w.get("step_seconds") or 0.0)
        generated = int(w.get("generated_tokens") or 0)
        rows.append(
            {
                "id": w.get("id", "embedded"),
                "model": w.get("model", ""),
                "running": w.get("running", 0),
                "waiting": w.get("waiting", 0),
                "sequences": w.get("sequences", w.get("slots", 0)),
                "sequences_in_use": w.get("sequences_in_use", 0),
                "running_limit": w.get("running_limit", 0),
                "floor_limit": w.get("floor_limit"),
                "floor_yielding": bool(w.get("floor_yielding")),
                "floor_yields": w.get("floor_yields", 0),
                "floor_yielded_seconds": w.get("floor_yielded_seconds", 0),
                "oldest_wait": w.get("oldest_wait_seconds"),
                "speed": w.get("predicted_stream_speed"),
                "tokens_per_second": round(generated / steps_seconds, 1) if steps_seconds else 0,
                "generated": generated,
                "prefilled": w.get("prefill_tokens", 0),
                "reused": w.get("reused_tokens", 0),
                "restored": w.get("restored_tokens", 0),
                "host_cache_mb": round(int(w.get("host_cache_bytes") or 0) / 2**20, 1),
                "host_cache_entries": w.get("host_cache_entries", 0),
                "host_cache_disk_mb": round(int(w.get("host_cache_disk_bytes") or 0) / 2**20, 1),
                "host_cache_disk_entries": w.get("host_cache_disk_entries", 0),
                "errors": w.get("errors", {}),
                "draining": w.get("draining", False),
            }
        )
    return {
        "ok": bool(health.get("ok")),
        "mode": health.get("mode", ""),
        "error": health.get("error") or health.get("state") or "",
        "queued": health.get("queued"),
        "workers": rows,
        "refusals": sorted(metrics.refusal_counts_for(tenants).items()),
    }


@staff_member_required
@never_cache
@require_safe
def engine_status(request: HttpRequest) -> HttpResponse:
    """The engine at a glance for staff; `?format=json` for the same numbers as JSON. The
    engine's own numbers are everyone's; refusals by tenant are scoped like the rest of the
    admin (a tenant admin sees their own tenants', a superuser everyone's)."""
    from asgiref.sync import async_to_sync

    summary = _summary(async_to_sync(_health)(), admin_tenant_slugs(request))
    if request.GET.get("format") == "json":
        return JsonResponse(summary)
    return render(
        request,
        "inference/status.html",
        {"summary": summary, "title": "Inference engine", "refresh": 5},
    )
