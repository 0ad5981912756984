from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from chat import services
from chat.models import CachedReply, ChatSession, Message
from tenants.admin_scope import TenantScopedAdmin, is_tenant_admin, tenant_filter


class MessageInline(admin.TabularInline[Message, ChatSession]):
    model = Message
    extra = 0
    fields = ("created_at", "role", "status", "content", "completion_tokens", "served_from_cache")
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    # The session page is already scoped to the tenant admin's tenants: its messages are theirs.
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if request.user.is_superuser:
            return super().has_view_permission(request, obj)
        return is_tenant_admin(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ChatSession)
class ChatSessionAdmin(TenantScopedAdmin[ChatSession]):
    tenant_admin_can_delete = True
    list_display = ["title", "tenant", "user", "api_key", "updated_at", "archived"]
    list_filter = ["archived", tenant_filter(), "updated_at"]
    list_select_related = ["tenant", "user", "api_key"]
    search_fields = ["title", "id", "user__username", "tenant__slug"]
    readonly_fields = ["id", "created_at", "updated_at"]
    autocomplete_fields = ["tenant", "user"]
    raw_id_fields = ["api_key"]
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(TenantScopedAdmin[Message]):
    tenant_path = "session__tenant"
    tenant_admin_can_delete = True
    list_display = [
        "created_at",
        "session",
        "role",
        "status",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "ttft_ms",
        "served_from_cache",
    ]
    list_filter = [
        "role",
        "status",
        "finish_reason",
        "served_from_cache",
        tenant_filter("session__tenant"),
    ]
    list_select_related = ["session"]
    search_fields = ["content", "session__title", "session__id"]
    readonly_fields = ["created_at", "updated_at", "session"]


@admin.register(CachedReply)
class CachedReplyAdmin(TenantScopedAdmin[CachedReply]):
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    list_display = ["question", "tenant", "enabled", "hits", "last_hit_at", "expires_at"]
    list_filter = ["enabled", tenant_filter(), "expires_at"]
    list_select_related = ["tenant"]
    actions = ["disable_selected", "enable_selected"]
    search_fields = ["question", "answer", "normalized_key"]
    readonly_fields = [
        "normalized_key",
        "hits",
        "last_hit_at",
        "created_by",
        "created_at",
        "updated_at",
    ]
    autocomplete_fields = ["tenant"]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField[Any] | None:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if field is not None and db_field.name == "tenant" and not request.user.is_superuser:
            # "Every tenant" is the superusers' to answer for.
            field.required = True
            field.help_text = ""
        return field

    def save_model(self, request: HttpRequest, obj: CachedReply, form: Any, change: bool) -> None:
        if not change and request.user.is_authenticated:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    @admin.action(description="Disable selected cached replies", permissions=["change"])
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[CachedReply]) -> None:
        self._set_enabled(request, queryset, enabled=False)

    @admin.action(description="Enable selected cached replies", permissions=["change"])
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[CachedReply]) -> None:
        self._set_enabled(request, queryset, enabled=True)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[CachedReply], *, enabled: bool
    ) -> None:
        changed = services.cached_replies_set_enabled(replies=queryset, enabled=enabled)
        for reply in changed:
            self.log_change(request, reply, [{"changed": {"fields": ["Enabled"]}}])
        verb = "Enabled" if enabled else "Disabled"
        self.message_user(request, f"{verb} {len(changed)} cached reply(ies).", messages.SUCCESS)
