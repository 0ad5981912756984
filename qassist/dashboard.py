"""The admin's home as a dashboard (issue #31 point 9): for each tenant in the staff member's
scope (a superuser: all; a tenant admin: theirs), its members, its documents by status, its
usage today, its open feedback, and a first-steps checklist while the tenant is new; the
engine's health once; and, for a staff account that runs no tenant, what to do about it.

Counts only, never content (docs/privacy.md): no message, question, comment or document text is
read here. Each number is one grouped query over all the tenants in scope, whatever their count.
The checklist is decided by `first_steps` from counts (pure); the links are resolved in
`_step_links`, which is the only part that asks what the person may do.

The feedback app keeps no "reviewed" state, so "open feedback" is the down-votes of the last
`OPEN_FEEDBACK_DAYS` days: the ones the feedback report is about.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import Count, Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from tenants.admin_scope import admin_tenants
from tenants.models import ApiKey, Membership, Tenant
from tenants.usage import no_usage, usage_by_tenant

OPEN_FEEDBACK_DAYS = 7
ENGINE_TIMEOUT = 2.0
LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_streams",
    "daily_token_quota",
    "monthly_token_quota",
)


@dataclass(frozen=True)
class TenantFacts:
    """What the dashboard knows of one tenant: counts, no content."""

    members: int = 0
    plain_members: int = 0  # role "member": people who chat, not only those who run it
    group_mappings: int = 0  # identity-provider groups that give membership
    documents: dict[str, int] = field(default_factory=dict)  # status -> count (knowledge base)
    sources: int = 0
    api_keys: int = 0
    limits_set: bool = False
    down_votes: int = 0  # the last OPEN_FEEDBACK_DAYS days


@dataclass(frozen=True)
class Link:
    text: str
    url: str


@dataclass(frozen=True)
class FirstStep:
    key: str
    name: str
    done: bool
    links: tuple[Link, ...] = ()


@dataclass(frozen=True)
class TenantPanel:
    tenant: Tenant
    facts: TenantFacts
    usage: dict[str, Any]  # tenants.usage.summary of today
    steps: list[FirstStep]

    @property
    def documents_ready(self) -> int:
        return self.facts.documents.get("ready", 0)

    @property
    def documents_queued(self) -> int:
        return self.facts.documents.get("queued", 0) + self.facts.documents.get("indexing", 0)

    @property
    def documents_failed(self) -> int:
        return self.facts.documents.get("failed", 0)

    @property
    def steps_left(self) -> int:
        return sum(not step.done for step in self.steps)

    @property
    def show_checklist(self) -> bool:
        """The checklist is for a new tenant: it goes once every step is done."""
        return self.steps_left > 0


def first_steps(facts: TenantFacts) -> list[tuple[str, str, bool]]:
    """The first steps of a tenant, (key, name, done), in the order they are best taken."""
    return [
        (
            "members",
            "Add members or map identity-provider groups",
            facts.plain_members > 0 or facts.group_mappings > 0,
        ),
        (
            "documents",
            "Upload documents or connect a source",
            sum(facts.documents.values()) > 0 or facts.sources > 0,
        ),
        ("limits", "Set limits and quotas", facts.limits_set),
        ("api_key", "Create an API key", facts.api_keys > 0),
    ]


def _per_tenant(rows: QuerySet[Any], path: str = "tenant_id") -> dict[int, int]:
    return {row[path]: row["n"] for row in rows.values(path).annotate(n=Count("id")).order_by()}


def tenant_facts(tenants: QuerySet[Tenant]) -> dict[int, TenantFacts]:
    """The facts of every tenant in `tenants`, in a fixed number of grouped queries."""
    from feedback.models import Feedback  # the apps below depend on tenants, not the reverse
    from knowledge.models import Document
    from signin.models import GroupMapping
    from sources.models import Source

    ids = list(tenants.values_list("id", flat=True))
    members = _per_tenant(Membership.objects.filter(tenant_id__in=ids))
    plain = _per_tenant(Membership.objects.filter(tenant_id__in=ids, role=Membership.Role.MEMBER))
    mappings = _per_tenant(GroupMapping.objects.filter(tenant_id__in=ids))
    sources = _per_tenant(Source.objects.filter(tenant_id__in=ids))
    keys = _per_tenant(ApiKey.objects.filter(tenant_id__in=ids))
    since = timezone.now() - timedelta(days=OPEN_FEEDBACK_DAYS)
    down = _per_tenant(
        Feedback.objects.filter(
            tenant_id__in=ids, rating=Feedback.Rating.DOWN, updated_at__gte=since
        )
    )
    documents: dict[int, dict[str, int]] = {}
    rows = Document.objects.filter(tenant_id__in=ids, session__isnull=True)
    for row in rows.values("tenant_id", "status").annotate(n=Count("id")).order_by():
        documents.setdefault(row["tenant_id"], {})[row["status"]] = row["n"]
    limits = {
        row["id"]: any(row[name] is not None for name in LIMIT_FIELDS)
        for row in Tenant.objects.filter(id__in=ids).values("id", *LIMIT_FIELDS)
    }
    return {
        pk: TenantFacts(
            members=members.get(pk, 0),
            plain_members=plain.get(pk, 0),
            group_mappings=mappings.get(pk, 0),
            documents=documents.get(pk, {}),
            sources=sources.get(pk, 0),
            api_keys=keys.get(pk, 0),
            limits_set=limits.get(pk, False),
            down_votes=down.get(pk, 0),
        )
        for pk in ids
    }


def _may_add(request: HttpRequest, model: type[Model]) -> bool:
    model_admin = admin.site.get_model_admin(model)
    return bool(model_admin.has_add_permission(request))


def _step_links(request: HttpRequest, key: str, tenant: Tenant) -> tuple[Link, ...]:
    """Where a step is done, among the pages this person may use (a tenant admin cannot map
    identity-provider groups: that is a superuser's)."""
    from knowledge.models import Document
    from signin.models import GroupMapping
    from sources.models import Source

    for_tenant = f"?tenant={tenant.pk}"
    candidates: dict[str, list[tuple[str, type[Model], str]]] = {
        "members": [
            ("Add a member", Membership, reverse("admin:tenants_membership_add") + for_tenant),
            ("Map a group", GroupMapping, reverse("admin:signin_groupmapping_add") + for_tenant),
        ],
        "documents": [
            ("Upload documents", Document, reverse("admin:knowledge_document_upload")),
            ("Connect a source", Source, reverse("admin:sources_source_add") + for_tenant),
        ],
        "api_key": [
            ("Create a key", ApiKey, reverse("admin:tenants_apikey_add") + for_tenant),
        ],
    }
    if key == "limits":
        tenant_admin = admin.site.get_model_admin(Tenant)
        if tenant_admin.has_change_permission(request, tenant):
            url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
            return (Link("Set limits", url),)
        return ()
    return tuple(
        Link(text, url) for text, model, url in candidates[key] if _may_add(request, model)
    )


def tenant_panels(request: HttpRequest, *, tenants: QuerySet[Tenant]) -> list[TenantPanel]:
    facts = tenant_facts(tenants)
    usage = usage_by_tenant(tenants=tenants, day=timezone.localdate())
    panels = []
    for tenant in tenants.order_by("slug"):
        its = facts[tenant.pk]
        steps = [
            FirstStep(key, name, done, () if done else _step_links(request, key, tenant))
            for key, name, done in first_steps(its)
        ]
        panels.append(TenantPanel(tenant, its, usage.get(tenant.pk) or no_usage(), steps))
    return panels


# --- the engine --------------------------------------------------------------------------------


def engine_summary(part: dict[str, Any]) -> dict[str, Any]:
    """What the home says of the engine, from /healthz's verdict on its report
    (`qassist.views.engine_verdict`): up or not, why not, and how busy."""
    workers = [w for w in part.get("workers") or [] if isinstance(w, dict)]
    state = part.get("state") or ""
    return {
        "ok": bool(part.get("ok")),
        "started": part.get("started", True),
        "mode": part.get("mode", ""),
        "problem": part.get("error") or state or "",
        "workers": len(workers),
        "running": sum(int(w.get("running") or 0) for w in workers),
        "waiting": sum(int(w.get("waiting") or 0) for w in workers),
        "models": list(part.get("models") or []),
    }


async def _engine_part() -> dict[str, Any]:
    from inference.service import started_engine_client
    from qassist.views import engine_verdict

    client = started_engine_client()
    if client is None:
        return {"ok": False, "started": False, "mode": "embedded"}
    try:
        health = await asyncio.wait_for(client.health(), ENGINE_TIMEOUT)
    except Exception as exc:  # Redis down, a worker gone: the home says so, no traceback
        return {"ok": False, "error": f"no answer: {type(exc).__name__}: {exc}".strip()}
    return engine_verdict(health)


def engine_health() -> dict[str, Any]:
    return engine_summary(async_to_sync(_engine_part)())


# --- a staff account without a tenant --------------------------------------------------------


def who_gives_workspaces(*, asking: AbstractBaseUser | AnonymousUser) -> list[str]:
    """The superusers a staff member without a tenant can ask, by name (and address when it
    is known): they add tenants and make people a tenant's admins."""
    people = User.objects.filter(is_superuser=True, is_active=True)
    if asking.pk is not None:
        people = people.exclude(pk=asking.pk)
    names = []
    for person in people.order_by("username")[:5]:
        name = person.get_full_name() or person.get_username()
        names.append(f"{name} <{person.email}>" if person.email else name)
    return names


# --- the home ---------------------------------------------------------------------------------


def admin_home(request: HttpRequest) -> dict[str, Any]:
    """The index page's context: `dashboard` (panels per tenant and the engine's health), or
    `no_workspace` for a staff account that runs no tenant."""
    scope = admin_tenants(request)
    if scope is not None and not scope.exists():
        return {"no_workspace": {"ask": who_gives_workspaces(asking=request.user)}}
    tenants = Tenant.objects.all() if scope is None else scope
    return {
        "dashboard": {
            "panels": tenant_panels(request, tenants=tenants),
            "engine": engine_health(),
            "open_feedback_days": OPEN_FEEDBACK_DAYS,
            "superuser": scope is None,
        }
    }
