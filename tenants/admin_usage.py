"""The admin's usage pages: one per tenant and one for the deployment (or, for a tenant admin,
for all of their tenants), with charts, tables, quota bars, drill-down and CSV export.

The pages are thin: the numbers come from `tenants.usage`. Chart data travels as JSON in a
`json_script` element, read by a static script (the admin's CSP allows no inline script).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.contrib.admin import AdminSite
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.utils.http import urlencode

from tenants.admin_scope import admin_tenants
from tenants.models import ApiKey, Tenant
from tenants.services import model_token_weights
from tenants.usage import (
    UsageReport,
    UsageScope,
    day_rows,
    usage_days_csv,
    usage_report,
    usage_tokens_since,
)

RANGES = (7, 30, 90)
DEFAULT_DAYS = 30
MAX_DAYS = 400


def _int_param(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "")
    return int(raw) if raw.isdigit() else None


def _dates(request: HttpRequest) -> tuple[date, date]:
    """?start=&end= (ISO dates, inclusive) if both are valid, else the last ?days= days."""
    today = timezone.localdate()
    start = parse_date(request.GET.get("start", "") or "x") if "start" in request.GET else None
    end = parse_date(request.GET.get("end", "") or "x") if "end" in request.GET else None
    if start is not None and end is not None and start <= end:
        return max(start, end - timedelta(days=MAX_DAYS - 1)), end
    days = _int_param(request, "days")
    days = days if days in RANGES else DEFAULT_DAYS
    return today - timedelta(days=days - 1), today


def _active_range(request: HttpRequest) -> int | None:
    """Which of the 7 / 30 / 90 days buttons the page shows (None: a date range)."""
    if "start" in request.GET and "end" in request.GET:
        return None
    days = _int_param(request, "days")
    return days if days in RANGES else DEFAULT_DAYS


def _scope(request: HttpRequest, tenants: QuerySet[Tenant] | None) -> UsageScope:
    start, end = _dates(request)
    return UsageScope(
        tenants=tenants,
        start=start,
        end=end,
        user_id=_int_param(request, "user"),
        api_key_id=_int_param(request, "api_key"),
    )


def usage_page(
    request: HttpRequest, *, admin_site: AdminSite, tenant: Tenant | None
) -> HttpResponse:
    """`tenant` None: every tenant the viewer may see (all of them for a superuser)."""
    visible = admin_tenants(request)
    tenants = Tenant.objects.filter(pk=tenant.pk) if tenant is not None else visible
    scope = _scope(request, tenants)
    report = usage_report(scope=scope)
    if request.GET.get("format") == "csv":
        return _csv(report, tenant)
    names = _names(report, visible)
    drill = _drill_down_label(scope, visible)
    context = {
        **admin_site.each_context(request),
        "title": f"Usage: {tenant}" if tenant is not None else "Usage: all tenants",
        "tenant": tenant,
        "report": report,
        "day_rows": day_rows(report.days),
        "names": names,
        "drill": drill,
        "ranges": RANGES,
        "days_param": _active_range(request),
        "csv_query": _query(request, format="csv"),
        "clear_drill_query": _query(request, user=None, api_key=None),
        "by_tenant": _labelled(report.by_tenant, names["tenant"]) if tenant is None else [],
        "by_user": _labelled(report.by_user, names["user"]),
        "by_api_key": _labelled(report.by_api_key, names["api_key"]),
        "by_model": [{**row, "label": row["id"] or "(not recorded)"} for row in report.by_model],
        "quotas": _quotas(tenant) if tenant is not None else [],
        "token_weights": sorted(model_token_weights().items()),
        "chart_data": _chart_data(report),
        "feedback": _feedback(scope),
    }
    return TemplateResponse(request, "admin/tenants/usage.html", context)


def _feedback(scope: UsageScope) -> Any:
    """Ratings of replies in the page's range and drill-down: counts only, no text."""
    # feedback depends on tenants, not the other way round: imported when needed.
    from feedback.services import feedback_counts

    return feedback_counts(
        tenants=scope.tenants,
        start=scope.start,
        end=scope.end,
        user_id=scope.user_id,
        api_key_id=scope.api_key_id,
    )


def _query(request: HttpRequest, **changes: str | None) -> str:
    params: dict[str, str] = {k: str(v) for k, v in request.GET.items() if k not in changes}
    params.update({k: v for k, v in changes.items() if v is not None})
    return urlencode(params)


def _names(report: UsageReport, visible: QuerySet[Tenant] | None) -> dict[str, dict[Any, str]]:
    tenant_ids = {row["id"] for row in report.by_tenant}
    user_ids = {row["id"] for row in report.by_user if row["id"] is not None}
    key_ids = {row["id"] for row in report.by_api_key if row["id"] is not None}
    tenants = Tenant.objects.filter(id__in=tenant_ids)
    if visible is not None:
        tenants = tenants.filter(id__in=visible)
    return {
        "tenant": {t.id: str(t) for t in tenants},
        "user": {
            **dict(User.objects.filter(id__in=user_ids).values_list("id", "username")),
            None: "(API key, no user)",
        },
        "api_key": {
            **{k.id: str(k) for k in ApiKey.objects.filter(id__in=key_ids)},
            None: "(browser, no key)",
        },
    }


def _labelled(rows: list[dict[str, Any]], names: dict[Any, str]) -> list[dict[str, Any]]:
    return [{**row, "label": names.get(row["id"], f"#{row['id']} (deleted)")} for row in rows]


def _drill_down_label(scope: UsageScope, visible: QuerySet[Tenant] | None) -> str:
    """What the page is narrowed to; a user or key outside the viewer's tenants is a 404."""
    if scope.user_id is not None:
        users = User.objects.filter(pk=scope.user_id)
        if visible is not None:
            users = users.filter(memberships__tenant__in=visible)
        user = users.first()
        if user is None:
            raise Http404("No such user.")
        return f"user {user.get_username()}"
    if scope.api_key_id is not None:
        keys = ApiKey.objects.filter(pk=scope.api_key_id)
        if visible is not None:
            keys = keys.filter(tenant__in=visible)
        key = keys.first()
        if key is None:
            raise Http404("No such API key.")
        return f"API key {key}"
    return ""


def _quotas(tenant: Tenant) -> list[dict[str, Any]]:
    today = timezone.localdate()
    bars = []
    for label, quota, since in (
        ("Today", tenant.daily_token_quota, today),
        ("This month", tenant.monthly_token_quota, today.replace(day=1)),
    ):
        used = usage_tokens_since(tenant=tenant, since=since)
        bars.append(
            {
                "label": label,
                "quota": quota,
                "used": used,
                "shown": min(used, quota) if quota else used,
                "share": used / quota if quota else None,
            }
        )
    return bars


def _chart_data(report: UsageReport) -> dict[str, Any]:
    return {
        "days": [row["day"].isoformat() for row in report.days],
        "prompt_tokens": [row["prompt_tokens"] for row in report.days],
        "completion_tokens": [row["completion_tokens"] for row in report.days],
        "ttft_p50": [row["ttft_p50"] for row in report.days],
        "ttft_p95": [row["ttft_p95"] for row in report.days],
        "ttft_p99": [row["ttft_p99"] for row in report.days],
        "hours": [row["hour"].strftime("%a %H:00") for row in report.hourly],
        "hourly_requests": [row["requests"] for row in report.hourly],
        "hourly_rejected": [row["rejected"] for row in report.hourly],
    }


def _csv(report: UsageReport, tenant: Tenant | None) -> HttpResponse:
    response = HttpResponse(usage_days_csv(report=report), content_type="text/csv; charset=utf-8")
    who = tenant.slug if tenant is not None else "all"
    scope = report.scope
    name = f"usage-{who}-{scope.start.isoformat()}-{scope.end.isoformat()}"
    if scope.user_id is not None:
        name += f"-user{scope.user_id}"
    if scope.api_key_id is not None:
        name += f"-key{scope.api_key_id}"
    response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
    return response
