from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Literal

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from tenants.models import ApiKey, Membership, Tenant, UsageRecord
from tenants.services import (
    ApiKeyStatus,
    api_key_create,
    api_key_filter_by_status,
    api_key_revoke,
    api_key_status,
    check_tenant_slug,
    usage_period_start,
    usage_totals,
)


class MembershipInline(admin.TabularInline[Membership, Tenant]):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]


class TenantAdminForm(forms.ModelForm[Tenant]):
    def clean_slug(self) -> str:
        slug: str = self.cleaned_data["slug"]
        if "slug" in self.changed_data:  # a tenant made before the rule keeps its slug
            check_tenant_slug(slug)
        return slug


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    form = TenantAdminForm
    list_display = [
        "slug",
        "name",
        "active",
        "priority",
        "requests_per_minute",
        "tokens_per_minute",
        "max_concurrent_streams",
        "daily_token_quota",
        "monthly_token_quota",
    ]
    list_filter = ["active", "priority"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["created_at", "updated_at", "usage_today", "usage_this_month"]
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["name", "slug", "active", "priority", "system_prompt"]}),
        (
            "Limits (empty = no limit)",
            {
                "fields": [
                    "requests_per_minute",
                    "tokens_per_minute",
                    "max_concurrent_streams",
                    "daily_token_quota",
                    "monthly_token_quota",
                ]
            },
        ),
        ("Usage", {"fields": ["usage_today", "usage_this_month"]}),
        ("Audit", {"fields": ["created_at", "updated_at"]}),
    ]

    @admin.display(description="usage today")
    def usage_today(self, obj: Tenant) -> str:
        return self._usage(obj, "day", obj.daily_token_quota)

    @admin.display(description="usage this month")
    def usage_this_month(self, obj: Tenant) -> str:
        return self._usage(obj, "month", obj.monthly_token_quota)

    def _usage(self, obj: Tenant, period: Literal["day", "month"], quota: int | None) -> str:
        if obj.pk is None:
            return "—"
        totals = usage_totals(tenant=obj, since=usage_period_start(period=period))
        text = (
            f"{totals['total_tokens']:,} tokens ({totals['prompt_tokens']:,} prompt + "
            f"{totals['completion_tokens']:,} completion) in {totals['requests']:,} requests"
        )
        if totals["rejected"]:
            text += f", {totals['rejected']:,} rejected"
        if quota:
            text += f"; {totals['total_tokens'] / quota:.0%} of the {quota:,} token quota"
        return text


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
    readonly_fields = ["created_at"]


class ApiKeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    statuses: dict[str, ApiKeyStatus] = {
        "active": "active",
        "expired": "expired",
        "revoked": "revoked",
    }

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> Iterable[tuple[str, str]]:
        return [(status, status.capitalize()) for status in self.statuses]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        status = self.statuses.get(self.value() or "")
        if status is None:
            return queryset
        return api_key_filter_by_status(queryset=queryset, status=status)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    """Keys are made by api_key_create: the add form asks only what a person decides."""

    # The raw key of a key made during a request, until response_add shows it (then dropped).
    _new_keys: weakref.WeakKeyDictionary[HttpRequest, str] = weakref.WeakKeyDictionary()

    list_display = [
        "prefix",
        "name",
        "tenant",
        "status",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = [ApiKeyStatusFilter, "tenant", "expires_at"]
    list_select_related = ["tenant"]
    search_fields = ["prefix", "name", "tenant__slug"]
    autocomplete_fields = ["tenant"]
    actions = ["revoke_selected"]
    add_fields = ["tenant", "name", "expires_at"]
    change_fields = [
        "tenant",
        "prefix",
        "status",
        "name",
        "expires_at",
        "revoked_at",
        "created_at",
        "created_by",
        "last_used_at",
    ]
    # Moving a key to another tenant or un-revoking it would surprise whoever audits it later.
    change_readonly_fields = [
        "tenant",
        "prefix",
        "status",
        "revoked_at",
        "created_at",
        "created_by",
        "last_used_at",
    ]

    # list[Any]: the stubs' field-group type is private and list is invariant.
    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[Any]:
        return list(self.change_fields if obj is not None else self.add_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        return self.change_readonly_fields if obj is not None else []

    @admin.display(description="status")
    def status(self, obj: ApiKey) -> str:
        return api_key_status(api_key=obj)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        api_key, raw_key = api_key_create(
            tenant=obj.tenant,
            name=obj.name,
            created_by=request.user if request.user.is_authenticated else None,
            expires_at=obj.expires_at,
        )
        # The admin goes on with `obj` (log entry, then response_add): make it the saved key.
        obj.pk = api_key.pk
        obj.refresh_from_db()
        obj._state.adding = False
        # Shown by response_add in the answer to this very POST: never put in a message, whose
        # default storage is a cookie, nor in the session, nor anywhere else.
        self._new_keys[request] = raw_key

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        raw_key = self._new_keys.pop(request, None)
        if raw_key is None:  # not made by save_model (cannot happen through the admin form)
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "api_key": obj,
            "raw_key": raw_key,
            "title": "New API key",
        }
        response = TemplateResponse(request, "admin/tenants/apikey/created.html", context)
        add_never_cache_headers(response)  # includes no-store: no cache keeps the key either
        return response

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        now = timezone.now()
        api_keys = list(queryset.select_related("tenant"))
        revoked = 0
        for api_key in api_keys:
            if api_key_status(api_key=api_key, now=now) == "revoked":
                continue
            api_key_revoke(api_key=api_key, at=now)
            self.log_change(request, api_key, [{"changed": {"fields": ["Revoked at"]}}])
            revoked += 1
        message = f"Revoked {revoked} API key(s)."
        if revoked < len(api_keys):
            message += f" {len(api_keys) - revoked} already revoked: left as they were."
        self.message_user(request, message, messages.SUCCESS)


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin[UsageRecord]):
    list_display = [
        "created_at",
        "tenant",
        "user",
        "api_key",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "latency_ms",
        "status",
    ]
    list_filter = ["status", "cached", "tenant", "created_at"]
    search_fields = ["tenant__slug", "user__username", "api_key__prefix"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "tenant",
        "user",
        "api_key",
        "session",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "latency_ms",
        "status",
        "created_at",
    ]

    def has_add_permission(self, request: object) -> bool:  # usage is recorded, never typed in
        return False
