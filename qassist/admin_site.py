"""qassist's admin site: its name, and an index grouped by what staff do rather than by app.

`ADMIN_SECTIONS` is the one place that says which page goes where. A model joins a section with
one line, `("app_label", "model_name")`, in that section's `entries` (in the order shown); a
page that is not a model's list is an `AdminLink`. A registered model that no section names is
listed under "Other", never hidden. Permissions are the model admins' own: a section shows only
the entries the person may see, and a section with none is left out.

The site replaces Django's default one (`qassist.apps.QassistAdminConfig`), so every
`@admin.register` and every `admin:` URL name stays as it was. Its index is the home: a
dashboard of the tenants in scope above the sections (`qassist.dashboard`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

Entry = tuple[str, str]  # (app_label, model_name)


@dataclass(frozen=True)
class AdminLink:
    """A page of the admin that is not a model's list: a dashboard, a status page."""

    key: str  # unique within the site: the row's HTML id
    name: str
    url_name: str
    description: str
    visible: Callable[[HttpRequest], bool]


@dataclass(frozen=True)
class AdminSection:
    label: str  # the section's anchor and CSS class: app-<label>
    name: str
    entries: tuple[Entry | AdminLink, ...]
    description: str = ""


def _sees_usage(request: HttpRequest) -> bool:
    from tenants.models import UsageRecord

    model_admin = admin.site.get_model_admin(UsageRecord)
    return bool(model_admin.has_view_permission(request))


def _runs_a_tenant(request: HttpRequest) -> bool:
    from tenants.admin_scope import is_tenant_admin

    return bool(request.user.is_superuser) or is_tenant_admin(request)


USAGE_DASHBOARD = AdminLink(
    key="usage-dashboard",
    name="Usage at a glance",
    url_name="admin:tenants_usagerecord_dashboard",
    description="tokens, requests, cache hits and first-token times, by day, tenant, person, key",
    visible=_sees_usage,
)
FEEDBACK_REPORT = AdminLink(
    key="feedback-report",
    name="Feedback: what to improve",
    url_name="admin:feedback_feedback_report",
    description="worst-rated questions, best-rated answers (make a cached reply), questions "
    "the documents did not answer",
    visible=_runs_a_tenant,
)
ENGINE_STATUS = AdminLink(
    key="engine-status",
    name="Engine status",
    url_name="engine_status",
    description="sequences in use, queue, tokens/s, host cache (live)",
    visible=_runs_a_tenant,
)

# Names for models whose own verbose names are not ours to change (third-party apps).
ENTRY_NAMES: dict[Entry, str] = {
    ("axes", "accessattempt"): "Login lockouts",
    ("axes", "accessfailurelog"): "Failed logins",
    ("axes", "accesslog"): "Logins",
    ("admin", "logentry"): "Admin history",
}

ADMIN_SECTIONS: tuple[AdminSection, ...] = (
    AdminSection(
        "people",
        "Tenants and people",
        (
            ("tenants", "tenant"),
            ("tenants", "membership"),
            ("auth", "user"),
            ("auth", "group"),
            ("tenants", "tenantgroup"),
            ("tenants", "apikey"),
            ("signin", "groupmapping"),
            ("signin", "tenantgroupmapping"),
            ("signin", "identity"),
        ),
    ),
    AdminSection(
        "knowledge",
        "Knowledge and cached replies",
        (
            ("knowledge", "document"),
            ("sources", "source"),
            ("chat", "cachedreply"),
            ("chat", "cachedreplycandidate"),
        ),
    ),
    AdminSection(
        "feedback",
        "Feedback",
        (
            FEEDBACK_REPORT,
            ("feedback", "feedback"),
        ),
    ),
    AdminSection(
        "usage",
        "Usage",
        (
            USAGE_DASHBOARD,
            ("tenants", "usagerecord"),
            ("chat", "batch"),
        ),
    ),
    AdminSection(
        "conversations",
        "Conversations and audit",
        (
            ("chat", "chatsession"),
            ("chat", "message"),
            ("chat", "contentread"),
            ("admin", "logentry"),
        ),
    ),
    AdminSection(
        "engine",
        "Engine and sign-ins",
        (
            ENGINE_STATUS,
            ("axes", "accessattempt"),
            ("axes", "accessfailurelog"),
            ("axes", "accesslog"),
        ),
    ),
)


def _link_row(link: AdminLink) -> dict[str, Any]:
    return {
        "name": link.name,
        "object_name": link.key,
        "perms": {"view": True},
        "admin_url": reverse(link.url_name),
        "add_url": None,
        "view_only": True,
        "description": link.description,
    }


def group_app_list(
    request: HttpRequest,
    apps: list[dict[str, Any]],
    sections: tuple[AdminSection, ...] = ADMIN_SECTIONS,
) -> list[dict[str, Any]]:
    """Django's app list (each app with the models this person may see) regrouped into
    `sections`; models no section names go to "Other" at the end."""
    rows: dict[Entry, dict[str, Any]] = {}
    for app in apps:
        for row in app["models"]:
            entry = (app["app_label"], row["object_name"].lower())
            rows[entry] = {**row, "name": ENTRY_NAMES.get(entry, row["name"])}
    index_url = reverse("admin:index")
    grouped: list[dict[str, Any]] = []
    for section in sections:
        models = []
        for item in section.entries:
            if isinstance(item, AdminLink):
                if item.visible(request):
                    models.append(_link_row(item))
            elif item in rows:
                models.append(rows.pop(item))
        if models:
            grouped.append(_section(section.label, section.name, index_url, models))
    if rows:
        leftover = sorted(rows.values(), key=lambda row: str(row["name"]))
        grouped.append(_section("other", "Other", index_url, leftover))
    return grouped


def _section(label: str, name: str, index_url: str, models: list[Any]) -> dict[str, Any]:
    return {
        "name": name,
        "app_label": label,
        "app_url": f"{index_url}#section-{label}",
        "has_module_perms": True,
        "models": models,
        "section": True,
    }


class QassistAdminSite(admin.AdminSite):
    site_header = "qassist admin"
    site_title = "qassist admin"
    index_title = "Run qassist"

    def get_app_list(
        self, request: HttpRequest, app_label: str | None = None
    ) -> list[dict[str, Any]]:
        apps = super().get_app_list(request, app_label)
        if app_label is not None:  # one app's own page (/admin/<app_label>/): Django's
            return apps
        return group_app_list(request, apps)

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        """The home: a dashboard of the tenants in this person's scope above the sections
        (qassist.dashboard), or what to do for a staff account that runs no tenant."""
        from qassist.dashboard import admin_home

        return super().index(request, {**admin_home(request), **(extra_context or {})})
