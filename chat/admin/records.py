"""Conversations, messages and the log of content reads, as records: who, when, how much; the
text only under the tenant's content audit (docs/privacy.md)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.options import IS_POPUP_VAR
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from chat.admin.shared import ReadOnlyRecordAdmin, readable_ids, reader
from chat.content_audit import content_read_record, content_search_record
from chat.models import (
    ChatSession,
    ContentRead,
    Message,
)
from chat.services.checks import ChatError
from chat.services.replies import reply_streaming_id
from chat.services.sessions import session_delete
from tenants.admin_scope import is_tenant_admin, tenant_filter
from tenants.models import Tenant


class ContentSearchMixin:
    """The admin's search box over conversation text, for tenants whose content audit is on,
    each search logged; elsewhere it finds conversations by id, person and key only."""

    content_lookups: tuple[str, ...] = ()
    tenant_path: ClassVar[str] = "tenant"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        results, duplicates = super().get_search_results(  # type: ignore[misc]
            request, queryset, search_term
        )
        term = search_term.strip()
        readable = readable_ids(request)
        if not term or not readable:
            return results, duplicates
        in_text = Q()
        for lookup in self.content_lookups:
            in_text |= Q(**{f"{lookup}__icontains": term})
        matching = queryset.filter(**{f"{self.tenant_path}__in": readable}).filter(in_text)
        content_search_record(
            reader=reader(request), tenants=Tenant.objects.filter(id__in=readable), query=term
        )
        return results | queryset.filter(pk__in=matching.values("pk")), duplicates


class MessageInline(admin.TabularInline[Message, ChatSession]):
    """A conversation's messages on its page: what they cost and how they ended, and their
    text only where the tenant's content audit lets this person read it."""

    model = Message
    extra = 0
    can_delete = False
    show_change_link = True
    metadata = (
        "created_at",
        "role",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "served_from_cache",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        if obj is not None and obj.tenant_id in readable_ids(request):
            return [*self.metadata[:2], "content", *self.metadata[2:]]
        return list(self.metadata)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.get_fields(request, obj)]

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
class ChatSessionAdmin(ContentSearchMixin, ReadOnlyRecordAdmin[ChatSession]):
    """Conversations as records: who, when, how much; the text only under a content audit.
    Deleting follows the chat's own rule (chat.services.sessions.session_delete): archived
    conversations only, never while a reply is being written."""

    tenant_admin_can_delete = True
    change_form_template = "admin/chat/chatsession/change_form.html"
    list_display = ["__str__", "tenant", "owner", "message_count", "updated_at", "archived"]
    list_filter = ["archived", tenant_filter(), "updated_at"]
    list_select_related = ["tenant", "user", "api_key"]
    search_fields = ["id", "user__username", "api_key__prefix", "external_user"]
    search_help_text = (
        "Finds conversations by id, username or API key; in tenants whose content audit is on, "
        "by their text too (each such search is logged)."
    )
    content_lookups = ("title", "messages__content")
    actions = ["delete_archived"]
    record_fields = [
        "id",
        "tenant",
        "owner",
        "api_key",
        "external_user",
        "created_at",
        "updated_at",
        "archived_state",
        "message_count",
        "tokens",
    ]
    inlines = [MessageInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChatSession]:
        sessions = super().get_queryset(request)
        # A GROUP BY query drops Meta.ordering: the autocomplete's pages need one.
        return sessions.annotate(n_messages=Count("messages", distinct=True)).order_by(
            "-updated_at"
        )

    def get_fields(self, request: HttpRequest, obj: ChatSession | None = None) -> list[Any]:
        if obj is not None and obj.tenant_id in readable_ids(request):
            return [self.record_fields[0], "title", *self.record_fields[1:]]
        return list(self.record_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.get_fields(request, obj)]

    @admin.display(description="owner")
    def owner(self, obj: ChatSession) -> str:
        if obj.user is not None:
            return obj.user.get_username()
        return f"API key {obj.api_key.prefix}…" if obj.api_key is not None else "—"

    @admin.display(description="archived")
    def archived_state(self, obj: ChatSession) -> str:
        """Said in words: the stock boolean field showed a red ✖ beside "Archived by its
        owner…" (its help text) on a conversation that is not archived (issue #31)."""
        if obj.archived:
            return "Yes: archived by its owner, read-only until restored or deleted"
        return "No"

    @admin.display(description="messages", ordering="n_messages")
    def message_count(self, obj: ChatSession) -> int:
        count = getattr(obj, "n_messages", None)
        return int(count) if count is not None else obj.messages.count()

    @admin.display(description="tokens (prompt + completion)")
    def tokens(self, obj: ChatSession) -> str:
        totals = obj.messages.aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
        return f"{totals['p'] or 0:,} + {totals['c'] or 0:,}"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and (obj is None or obj.archived)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deletes anything: replaced by delete_archived
        return actions

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        session = self.get_object(request, object_id)
        readable = (
            session is not None
            and self.has_view_permission(request, session)
            and session.tenant_id in readable_ids(request)
        )
        if readable and session is not None and request.method == "GET":
            content_read_record(reader=reader(request), session=session)
        context = {"content_shown": readable, "record": session, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        session = self.get_object(request, object_id)
        if session is not None and self.has_view_permission(request, session):
            problem = _why_not_deletable(session)
            if problem:
                self.message_user(request, problem, messages.ERROR)
                return HttpResponseRedirect(
                    reverse("admin:chat_chatsession_change", args=[session.pk])
                )
        return super().delete_view(request, object_id, extra_context)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        """Back to the conversations list, not the admin home (where Django sends whoever
        lacks the model-wide change permission: every reader of these records)."""
        response = super().response_delete(request, obj_display, obj_id)
        if IS_POPUP_VAR in request.POST:
            return response
        return HttpResponseRedirect(reverse("admin:chat_chatsession_changelist"))

    def delete_model(self, request: HttpRequest, obj: ChatSession) -> None:
        session_delete(session=obj)  # re-checks, under the row lock

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ChatSession]) -> None:
        for session in queryset:
            try:
                session_delete(session=session)
            except ChatError as error:
                self.message_user(request, f"{session}: {error.message}", messages.WARNING)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # A conversation's messages go with it (nobody may delete a message on its own).
        perms_needed.discard(Message._meta.verbose_name)
        return deleted, counts, perms_needed, protected

    @admin.action(
        description="Delete selected archived conversations for good", permissions=["delete"]
    )
    def delete_archived(
        self, request: HttpRequest, queryset: QuerySet[ChatSession]
    ) -> HttpResponse | None:
        archived = queryset.filter(archived=True)
        left = queryset.count() - archived.count()
        if left and not request.POST.get("post"):
            self.message_user(
                request,
                f"{left} conversation(s) not archived: left as they are (a conversation is "
                "archived by its owner before it can be deleted).",
                messages.WARNING,
            )
        if not archived.exists():
            return None
        response: HttpResponse | None = delete_selected(self, request, archived)
        return response


def _why_not_deletable(session: ChatSession) -> str:
    """What stops the admin from deleting `session` now, by the chat's own rule; "" if nothing."""
    if not session.archived:
        return (
            "Only an archived conversation can be deleted: its owner archives it first "
            "(the chat's own rule)."
        )
    if reply_streaming_id(session=session) is not None:
        return "A reply is still being written in this conversation: try again once it ends."
    return ""


@admin.register(Message)
class MessageAdmin(ContentSearchMixin, ReadOnlyRecordAdmin[Message]):
    """Messages as records: read-only for everyone, deleted only with their conversation."""

    tenant_path = "session__tenant"
    change_form_template = "admin/chat/message/change_form.html"
    list_display = [
        "__str__",
        "created_at",
        "session",
        "tenant",
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
    list_select_related = ["session__tenant"]
    search_fields = ["session__id"]
    search_help_text = (
        "Finds messages by conversation id; in tenants whose content audit is on, by their "
        "text too (each such search is logged)."
    )
    content_lookups = ("content",)
    record_fields = [
        "session",
        "parent",
        "role",
        "status",
        "finish_reason",
        "error",
        "prompt_tokens",
        "completion_tokens",
        "ttft_ms",
        "served_from_cache",
        "created_at",
        "updated_at",
    ]

    def get_fields(self, request: HttpRequest, obj: Message | None = None) -> list[Any]:
        if obj is not None and obj.session.tenant_id in readable_ids(request):
            return [*self.record_fields[:3], "content", *self.record_fields[3:]]
        return list(self.record_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.get_fields(request, obj)]

    @admin.display(description="tenant", ordering="session__tenant__slug")
    def tenant(self, obj: Message) -> Tenant:
        return obj.session.tenant

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a message goes only with its conversation (its versions hang on it)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        message = self.get_object(request, object_id)
        readable = (
            message is not None
            and self.has_view_permission(request, message)
            and message.session.tenant_id in readable_ids(request)
        )
        if readable and message is not None and request.method == "GET":
            content_read_record(reader=reader(request), session=message.session, message=message)
        context = {"content_shown": readable, "record": message, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)


CONTENT_READ_FIELDS = [
    "at",
    "reader_name",
    "kind",
    "tenant",
    "owner_name",
    "conversation",
    "message_id",
    "query",
]


@admin.register(ContentRead)
class ContentReadAdmin(ReadOnlyRecordAdmin[ContentRead]):
    """Every reading of conversation text in the admin. Nobody edits or deletes one."""

    list_display = ["at", "reader_name", "kind", "tenant", "owner_name", "conversation", "query"]
    list_filter = ["kind", tenant_filter(), "at"]
    list_select_related = ["tenant"]
    search_fields = ["reader_name", "owner_name", "=session_id"]
    date_hierarchy = "at"
    fields = tuple(CONTENT_READ_FIELDS)
    readonly_fields = tuple(CONTENT_READ_FIELDS)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ContentRead]:
        return (
            super()
            .get_queryset(request)
            .annotate(session_exists=Exists(ChatSession.objects.filter(id=OuterRef("session_id"))))
        )

    @admin.display(description="conversation")
    def conversation(self, obj: ContentRead) -> str:
        if obj.session_id is None:
            return "—"
        label = f"Conversation {str(obj.session_id)[:8]}"
        exists = getattr(obj, "session_exists", None)
        if exists is None:
            exists = ChatSession.objects.filter(id=obj.session_id).exists()
        if not exists:
            return f"{label} (deleted)"
        url = reverse("admin:chat_chatsession_change", args=[obj.session_id])
        return format_html('<a href="{}">{}</a>', url, label)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
