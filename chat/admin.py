from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from chat.models import CachedReply, ChatSession, Message


class MessageInline(admin.TabularInline[Message, ChatSession]):
    model = Message
    extra = 0
    fields = ("created_at", "role", "status", "content", "completion_tokens", "served_from_cache")
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin[ChatSession]):
    list_display = ["title", "tenant", "user", "api_key", "updated_at", "archived"]
    list_filter = ["archived", "tenant", "updated_at"]
    search_fields = ["title", "id", "user__username", "tenant__slug"]
    readonly_fields = ["id", "created_at", "updated_at"]
    autocomplete_fields = ["tenant", "user"]
    raw_id_fields = ["api_key"]
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin[Message]):
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
    list_filter = ["role", "status", "finish_reason", "served_from_cache"]
    search_fields = ["content", "session__title", "session__id"]
    readonly_fields = ["created_at", "updated_at", "session"]


@admin.register(CachedReply)
class CachedReplyAdmin(admin.ModelAdmin[CachedReply]):
    list_display = ["question", "tenant", "enabled", "hits", "last_hit_at", "expires_at"]
    list_filter = ["enabled", "tenant", "expires_at"]
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

    def save_model(self, request: HttpRequest, obj: CachedReply, form: Any, change: bool) -> None:
        if not change and request.user.is_authenticated:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
