from __future__ import annotations

from django.contrib import admin

from tenants.models import ApiKey, Membership, Tenant, UsageRecord


class MembershipInline(admin.TabularInline[Membership, Tenant]):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
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
    readonly_fields = ["created_at", "updated_at"]
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
        ("Audit", {"fields": ["created_at", "updated_at"]}),
    ]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
    readonly_fields = ["created_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    list_display = ["prefix", "name", "tenant", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["tenant", "revoked_at", "expires_at"]
    search_fields = ["prefix", "name", "tenant__slug"]
    readonly_fields = ["prefix", "created_at", "created_by", "last_used_at"]
    autocomplete_fields = ["tenant"]


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
