from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db import models
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from chat import batches, cached_replies, services
from chat.content_audit import content_read_record, content_search_record, readable_tenants
from chat.models import (
    Batch,
    BatchItem,
    CachedReply,
    CachedReplyCandidate,
    CachedReplyImport,
    ChatSession,
    ContentRead,
    Message,
)
from chat.progress import batch_outlook, draft_outlook, duration_text
from chat.tasks import draft_dispatch
from inference.service import engine_mode
from inference.types import ChatMessage
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, is_tenant_admin, tenant_filter
from tenants.models import Tenant

_M = TypeVar("_M", bound=models.Model)
_READABLE_ATTR = "_qassist_readable_tenants"


def _readable_ids(request: HttpRequest) -> set[int]:
    """The tenants whose conversations this person may read here (chat/content_audit.py),
    worked out once per request."""
    cached: set[int] | None = getattr(request, _READABLE_ATTR, None)
    if cached is None:
        cached = set(readable_tenants(user=request.user).values_list("id", flat=True))
        setattr(request, _READABLE_ATTR, cached)
    return cached


def _reader(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # the admin's pages are behind its login
    return user


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
        readable = _readable_ids(request)
        if not term or not readable:
            return results, duplicates
        in_text = Q()
        for lookup in self.content_lookups:
            in_text |= Q(**{f"{lookup}__icontains": term})
        matching = queryset.filter(**{f"{self.tenant_path}__in": readable}).filter(in_text)
        content_search_record(
            reader=_reader(request), tenants=Tenant.objects.filter(id__in=readable), query=term
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
        if obj is not None and obj.tenant_id in _readable_ids(request):
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


class ReadOnlyRecordAdmin(TenantScopedAdmin[_M]):
    """A record of what was said: nobody adds or edits one in the admin."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ChatSession)
class ChatSessionAdmin(ContentSearchMixin, ReadOnlyRecordAdmin[ChatSession]):
    """Conversations as records: who, when, how much; the text only under a content audit.
    Deleting follows the chat's own rule (services.session_delete): archived conversations
    only, never while a reply is being written."""

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
        "archived",
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
        if obj is not None and obj.tenant_id in _readable_ids(request):
            return [self.record_fields[0], "title", *self.record_fields[1:]]
        return list(self.record_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.get_fields(request, obj)]

    @admin.display(description="owner")
    def owner(self, obj: ChatSession) -> str:
        if obj.user is not None:
            return obj.user.get_username()
        return f"API key {obj.api_key.prefix}…" if obj.api_key is not None else "—"

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
            and session.tenant_id in _readable_ids(request)
        )
        if readable and session is not None and request.method == "GET":
            content_read_record(reader=_reader(request), session=session)
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

    def delete_model(self, request: HttpRequest, obj: ChatSession) -> None:
        services.session_delete(session=obj)  # re-checks, under the row lock

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ChatSession]) -> None:
        for session in queryset:
            try:
                services.session_delete(session=session)
            except services.ChatError as error:
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
    if services.reply_streaming_id(session=session) is not None:
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
        if obj is not None and obj.session.tenant_id in _readable_ids(request):
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
            and message.session.tenant_id in _readable_ids(request)
        )
        if readable and message is not None and request.method == "GET":
            content_read_record(reader=_reader(request), session=message.session, message=message)
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


class PhraseTestForm(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(),
        required=False,
        empty_label="(no tenant: only the replies for every tenant)",
        help_text="Asked by a member of this tenant.",
    )
    phrase = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Type the question as a user would.",
    )
    follow_up = forms.BooleanField(
        required=False, label="Asked as a follow-up (not the conversation's first message)"
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Tenant.objects.all() if tenants is None else tenants
        if tenants is not None:  # tenant admins test as one of their tenants
            field.required = True
            field.empty_label = None


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise cached_replies.CachedReplyImportError(
            ["The file is not UTF-8 text: save it as “CSV UTF-8” and try again."]
        ) from None


def _imported(result: cached_replies.ImportResult) -> str:
    text = (
        f"Imported {result.created + result.updated} cached reply(ies): "
        f"{result.created} new, {result.updated} updated."
    )
    if result.ignored_columns:
        text += (
            f" The column(s) {', '.join(result.ignored_columns)} were not applied: what "
            "happened to a reply (its hits, who made it and when) is restored by superusers only."
        )
    return text


class CsvImportForm(forms.Form):
    file = forms.FileField(
        help_text="UTF-8 CSV with the export's columns; question and answer are required."
    )


@admin.register(CachedReply)
class CachedReplyAdmin(TenantScopedAdmin[CachedReply]):
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    change_list_template = "admin/chat/cachedreply/change_list.html"
    list_display = ["question", "tenant", "enabled", "hits", "last_hit_at", "expires_at"]
    list_filter = ["enabled", tenant_filter(), "expires_at"]
    list_select_related = ["tenant"]
    actions = ["disable_selected", "enable_selected", "export_csv"]
    search_fields = ["question", "alternatives", "answer", "normalized_key"]
    fields = [
        "tenant",
        "question",
        "alternatives",
        "answer",
        "enabled",
        "expires_at",
        "matched_keys",
        "hits",
        "last_hit_at",
        "created_by",
        "created_at",
        "updated_at",
    ]
    readonly_fields = [
        "matched_keys",
        "hits",
        "last_hit_at",
        "created_by",
        "created_at",
        "updated_at",
    ]
    autocomplete_fields = ["tenant"]

    @admin.display(description="matched as")
    def matched_keys(self, obj: CachedReply) -> str:
        if obj.pk is None:
            return "—"
        from chat.cache import reply_keys

        return " | ".join(reply_keys(obj))

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "test-phrase/",
                self.admin_site.admin_view(self.test_phrase_view),
                name="chat_cachedreply_test_phrase",
            ),
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="chat_cachedreply_import",
            ),
            path(
                "import/<uuid:pk>/",
                self.admin_site.admin_view(self.import_status_view),
                name="chat_cachedreply_import_status",
            ),
        ]
        return own + super().get_urls()

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

    # --- test a phrase -----------------------------------------------------------------------

    def test_phrase_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        tenants = admin_tenants(request)
        form = PhraseTestForm(request.GET or None, tenants=tenants)
        result = None
        if form.is_valid():
            result = cached_replies.cached_reply_test_phrase(
                tenant=form.cleaned_data["tenant"],
                phrase=form.cleaned_data["phrase"],
                follow_up=form.cleaned_data["follow_up"],
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Test a phrase",
            "form": form,
            "result": result,
        }
        return TemplateResponse(request, "admin/chat/cachedreply/test_phrase.html", context)

    # --- CSV -----------------------------------------------------------------------------------

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[CachedReply]) -> HttpResponse:
        replies = queryset.select_related("tenant", "created_by").order_by("tenant__slug", "id")
        response = HttpResponse(
            cached_replies.cached_replies_export(replies=replies),
            content_type="text/csv; charset=utf-8",
        )
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="cached-replies-{stamp}.csv"'
        return response

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Small files are imported in the request; larger ones (more than
        IMPORT_INLINE_MAX_ROWS rows) by a Celery task, with a page that shows its progress."""
        if not (self.has_add_permission(request) and self.has_change_permission(request)):
            raise PermissionDenied
        form = CsvImportForm(request.POST or None, request.FILES or None)
        errors: list[str] = []
        user = request.user if isinstance(request.user, User) else None
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                cached_replies.check_import_size(size=upload.size or 0)
                text = _utf8(upload.read())
                if cached_replies.import_row_count(text) > cached_replies.IMPORT_INLINE_MAX_ROWS:
                    job = cached_replies.cached_reply_import_create(
                        text=text, user=user, file_name=upload.name or ""
                    )
                    return HttpResponseRedirect(
                        reverse("admin:chat_cachedreply_import_status", args=[job.pk])
                    )
                result = cached_replies.cached_replies_import(
                    text=text, tenants=admin_tenants(request), user=user
                )
            except cached_replies.CachedReplyImportError as error:
                errors = error.errors
            else:
                self.message_user(request, _imported(result), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:chat_cachedreply_changelist"))
        max_bytes, max_rows = cached_replies.import_limits()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Import cached replies from CSV",
            "form": form,
            "errors": errors,
            "columns": cached_replies.CSV_COLUMNS,
            "record_columns": cached_replies.RECORD_COLUMNS,
            "max_mb": max_bytes // 2**20,
            "max_rows": max_rows,
            "inline_rows": cached_replies.IMPORT_INLINE_MAX_ROWS,
            "imports": self._imports(request)[:5],
        }
        return TemplateResponse(request, "admin/chat/cachedreply/import.html", context)

    def _imports(self, request: HttpRequest) -> QuerySet[CachedReplyImport]:
        """Background imports this user may follow: their own; a superuser's, everyone's."""
        imports = CachedReplyImport.objects.select_related("created_by").defer("text")
        if request.user.is_superuser:
            return imports
        return imports.filter(created_by_id=request.user.pk)

    def import_status_view(self, request: HttpRequest, pk: Any) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        job = get_object_or_404(self._imports(request), pk=pk)
        percent = round(100 * job.rows_done / job.rows_total) if job.rows_total else 0
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Import of {job}",
            "job": job,
            "percent": percent,
            "more_errors": max(0, job.error_count - len(job.errors)),
            "refresh": None if job.finished else 2,
        }
        return TemplateResponse(request, "admin/chat/cachedreply/import_status.html", context)

    # --- bulk switches -----------------------------------------------------------------------

    @admin.action(description="Disable selected cached replies", permissions=["change"])
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[CachedReply]) -> None:
        self._set_enabled(request, queryset, enabled=False)

    @admin.action(description="Enable selected cached replies", permissions=["change"])
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[CachedReply]) -> None:
        self._set_enabled(request, queryset, enabled=True)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[CachedReply], *, enabled: bool
    ) -> None:
        changed = cached_replies.cached_replies_set_enabled(replies=queryset, enabled=enabled)
        for reply in changed:
            self.log_change(request, reply, [{"changed": {"fields": ["Enabled"]}}])
        verb = "Enabled" if enabled else "Disabled"
        self.message_user(request, f"{verb} {len(changed)} cached reply(ies).", messages.SUCCESS)


class RecurringFilter(admin.SimpleListFilter):
    title = "how often"
    parameter_name = "recurring"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> Iterable[tuple[str, str]]:
        return [("all", "Asked once or more")]

    def choices(self, changelist: Any) -> Iterator[Any]:
        minimum = settings.QASSIST_CANDIDATE_MIN_COUNT
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": f"Recurring (asked {minimum}+ times)",
        }
        yield {
            "selected": self.value() == "all",
            "query_string": changelist.get_query_string({self.parameter_name: "all"}),
            "display": "Asked once or more",
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "all":
            return queryset
        return queryset.filter(count__gte=settings.QASSIST_CANDIDATE_MIN_COUNT)


class PromotedFilter(admin.SimpleListFilter):
    title = "cached reply"
    parameter_name = "promoted"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> Iterable[tuple[str, str]]:
        return [("no", "Not yet made"), ("yes", "Made")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(promoted_to__isnull=True)
        if self.value() == "yes":
            return queryset.filter(promoted_to__isnull=False)
        return queryset


@admin.register(CachedReplyCandidate)
class CachedReplyCandidateAdmin(TenantScopedAdmin[CachedReplyCandidate]):
    """First questions people keep asking, answered by the model each time: promote one to a
    cached reply (disabled until reviewed), or have the model draft a better answer first."""

    tenant_admin_can_delete = True
    list_display = [
        "question",
        "promote",
        "count",
        "latest_answer",
        "draft",
        "last_asked_at",
        "tenant",
    ]
    list_filter = [RecurringFilter, PromotedFilter, "draft_status", tenant_filter()]
    list_select_related = ["tenant", "promoted_to"]
    search_fields = ["question", "last_answer", "draft_answer"]
    actions = ["draft_answers", "promote_selected"]
    fields = [
        "tenant",
        "question",
        "count",
        "first_asked_at",
        "last_asked_at",
        "last_answer",
        "draft",
        "draft_error",
        "draft_answer",
        "promoted_to",
    ]
    readonly_fields = [
        "tenant",
        "question",
        "count",
        "first_asked_at",
        "last_asked_at",
        "last_answer",
        "draft",
        "draft_error",
        "promoted_to",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False  # candidates are counted from real conversations

    def get_queryset(self, request: HttpRequest) -> QuerySet[CachedReplyCandidate]:
        # A question asked less often than a candidate must be could be one person's words:
        # shown only under its tenant's content audit (docs/privacy.md).
        return (
            super()
            .get_queryset(request)
            .filter(
                Q(count__gte=settings.QASSIST_CANDIDATE_MIN_COUNT) | Q(tenant__content_audit=True)
            )
        )

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = list(super().get_list_display(request))
        tenants = admin_tenants(request)
        if tenants is not None and tenants.count() == 1:
            columns.remove("tenant")  # one tenant: the column would say the same on every row
        return columns

    @admin.display(description="draft", ordering="draft_status")
    def draft(self, obj: CachedReplyCandidate) -> str:
        """Where the draft stands: its place in the queue and a wait, or how far it has come."""
        status = CachedReplyCandidate.DraftStatus
        if obj.draft_status == status.PENDING:
            outlook = draft_outlook(obj)
            parts = ["Queued"]
            parts.append(f"{outlook.ahead} ahead" if outlook.ahead else "next in line")
            if outlook.seconds_left is not None:
                parts.append(f"ready in {duration_text(outlook.seconds_left)}")
            return _busy(" · ".join(parts))
        if obj.draft_status == status.RUNNING:
            outlook = draft_outlook(obj)
            parts = [f"Drafting… {len(obj.draft_answer):,} characters so far"]
            if outlook.seconds_left is not None:
                parts.append(f"{duration_text(outlook.seconds_left)} left")
            return _busy(" · ".join(parts))
        return obj.get_draft_status_display()

    @admin.display(description="model's latest answer")
    def latest_answer(self, obj: CachedReplyCandidate) -> str:
        text = " ".join(obj.last_answer.split())
        return text if len(text) <= 100 else text[:99] + "…"

    @admin.display(description="cached reply")
    def promote(self, obj: CachedReplyCandidate) -> str:
        if obj.promoted_to is not None:
            url = reverse("admin:chat_cachedreply_change", args=[obj.promoted_to.pk])
            state = "enabled" if obj.promoted_to.enabled else "disabled"
            return format_html('<a href="{}">made ({})</a>', url, state)
        url = reverse("admin:chat_cachedreplycandidate_promote", args=[obj.pk])
        # Inside the changelist's form: posts it (with its CSRF token) to the promote view.
        return format_html(
            '<button type="submit" class="button" formaction="{}" formmethod="post">'
            "Promote</button>",
            url,
        )

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:pk>/promote/",
                self.admin_site.admin_view(self.promote_view),
                name="chat_cachedreplycandidate_promote",
            )
        ]
        return own + super().get_urls()

    def promote_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:chat_cachedreplycandidate_changelist"))
        candidate = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_change_permission(request, candidate) or not self._may_add_reply(request):
            raise PermissionDenied
        try:
            reply = self._promote(request, candidate)
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:chat_cachedreplycandidate_changelist"))
        self.message_user(
            request,
            "Made a cached reply from the question, disabled: check the answer, tick "
            "“Enabled” and save.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:chat_cachedreply_change", args=[reply.pk]))

    def _may_add_reply(self, request: HttpRequest) -> bool:
        reply_admin = self.admin_site.get_model_admin(CachedReply)
        return reply_admin.has_add_permission(request)

    def _promote(self, request: HttpRequest, candidate: CachedReplyCandidate) -> CachedReply:
        user = request.user if request.user.is_authenticated else None
        already = candidate.promoted_to is not None
        reply = cached_replies.candidate_promote(candidate=candidate, user=user)
        if not already:
            reply_admin = self.admin_site.get_model_admin(CachedReply)
            reply_admin.log_addition(request, reply, [{"added": {}}])
        return reply

    @admin.action(
        description="Promote selected to cached replies (disabled)", permissions=["change"]
    )
    def promote_selected(
        self, request: HttpRequest, queryset: QuerySet[CachedReplyCandidate]
    ) -> None:
        if not self._may_add_reply(request):
            raise PermissionDenied
        made, refused = 0, []
        for candidate in queryset.select_related("tenant", "promoted_to"):
            try:
                self._promote(request, candidate)
                made += 1
            except ValidationError as error:
                refused.append(f"“{candidate}”: {' '.join(error.messages)}")
        self.message_user(request, f"Made {made} cached reply(ies), disabled until reviewed.")
        for problem in refused:
            self.message_user(request, problem, messages.WARNING)

    @admin.action(description="Draft an answer with the model (background)", permissions=["change"])
    def draft_answers(self, request: HttpRequest, queryset: QuerySet[CachedReplyCandidate]) -> None:
        started = 0
        for candidate in queryset:
            if cached_replies.candidate_draft_start(candidate=candidate):
                draft_dispatch(candidate_id=candidate.pk)
                started += 1
        skipped = queryset.count() - started
        message = (
            f"Queued {started} draft(s), ahead of any batch; the model writes them at background "
            "priority (replies people wait for go first). The list shows each one's place and "
            "progress, and refreshes until they are done."
        )
        if skipped:
            message += f" {skipped} already queued or being drafted."
        self.message_user(request, message, messages.SUCCESS)


def _busy(text: str) -> str:
    """Progress text marked as unfinished: static/qassist_admin/refresh.js reloads the page
    while one is on it."""
    return format_html('<span class="qa-wait" data-qa-busy="1">{}</span>', text)


class BatchSubmitForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none())
    name = forms.CharField(max_length=200, required=False)
    prompts = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80}),
        help_text="One prompt per line; each is asked on its own, as a new conversation.",
    )
    max_tokens = forms.IntegerField(min_value=1, max_value=8192, required=False)

    def __init__(self, *args: Any, tenants: QuerySet[Tenant] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Tenant.objects.filter(active=True) if tenants is None else tenants

    def clean_prompts(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["prompts"].splitlines()]
        prompts = [line for line in lines if line]
        if not prompts:
            raise ValidationError("Type at least one prompt.")
        return prompts


BATCH_FIELDS: list[str] = [
    "id",
    "name",
    "tenant",
    "api_key",
    "created_by",
    "status",
    "progress",
    "results",
    "created_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
]


def _batch_wait_text(batch: Batch) -> str:
    """'Queued · 2 jobs ahead · done in about 4 min' or 'Running · about 1 min left';
    nothing once the batch is over."""
    if batch.status not in (Batch.Status.QUEUED, Batch.Status.RUNNING):
        return ""
    outlook = batch_outlook(batch)
    if batch.status == Batch.Status.QUEUED:
        parts = ["Queued", f"{outlook.ahead} job(s) ahead" if outlook.ahead else "next in line"]
        if outlook.seconds_left is not None:
            parts.append(f"done in {duration_text(outlook.seconds_left)}")
    else:
        parts = ["Running"]
        if outlook.seconds_left is not None:
            parts.append(f"{duration_text(outlook.seconds_left)} left")
    return " · ".join(parts)


@dataclass(frozen=True)
class ItemRow:
    index: int
    custom_id: str
    prompt: str
    reply: str
    status: str
    error: str
    prompt_tokens: int
    completion_tokens: int


REPLY_CHARS_SHOWN = 2000


def _items_page(batch: Batch, request: HttpRequest, per_page: int) -> Page[BatchItem]:
    """One page of the batch's items, for the results table (the JSONL has them all)."""
    return Paginator(batch.items.order_by("index"), per_page).get_page(request.GET.get("p"))


def _item_row(item: BatchItem) -> ItemRow:
    prompts = [m.get("content", "") for m in item.messages if isinstance(m, dict)]
    asked = [m.get("content", "") for m in item.messages if m.get("role") == "user"]
    prompt = str((asked or prompts or [""])[-1])
    reply = item.content
    if len(reply) > REPLY_CHARS_SHOWN:
        reply = reply[:REPLY_CHARS_SHOWN] + "… (the whole reply is in the JSONL download)"
    return ItemRow(
        index=item.index,
        custom_id=item.custom_id,
        prompt=prompt,
        reply=reply,
        status=item.get_status_display(),
        error=f"{item.error_code}: {item.error}" if item.error_code else item.error,
        prompt_tokens=item.prompt_tokens,
        completion_tokens=item.completion_tokens,
    )


@admin.register(Batch)
class BatchAdmin(TenantScopedAdmin[Batch]):
    """Batches submitted over REST or here, with their progress; cancel, download results."""

    tenant_admin_can_add = True
    change_list_template = "admin/chat/batch/change_list.html"
    list_display = ["__str__", "tenant", "status", "progress", "created_at", "finished_at"]
    list_filter = ["status", tenant_filter()]
    list_select_related = ["tenant"]
    search_fields = ["name", "id"]
    actions = ["cancel_selected"]
    fields = tuple(BATCH_FIELDS)
    readonly_fields = tuple(BATCH_FIELDS)
    change_form_template = "admin/chat/batch/change_form.html"
    items_per_page = 50

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a batch is not edited: its page has no Save button

    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        batch = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if batch is not None and self.has_view_permission(request, batch):
            page = _items_page(batch, request, self.items_per_page)
            context["items_page"] = page
            context["item_rows"] = [_item_row(item) for item in page.object_list]
            context["can_cancel"] = self.has_cancel_permission(request, batch) and (
                batch.status in (Batch.Status.QUEUED, Batch.Status.RUNNING)
            )
        return super().change_view(request, object_id, form_url, context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_ok=Count("items", filter=Q(items__status=BatchItem.Status.DONE)),
                n_failed=Count("items", filter=Q(items__status=BatchItem.Status.FAILED)),
                n_cancelled=Count("items", filter=Q(items__status=BatchItem.Status.CANCELLED)),
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if engine_mode() != "redis":
            batches.batches_resume()  # embedded: the web process restarts orphaned batches
        return super().changelist_view(request, extra_context)

    @admin.display(description="progress")
    def progress(self, obj: Batch) -> str:
        """A bar of the items with an outcome; the text says which outcomes."""
        if hasattr(obj, "n_ok"):  # annotated by get_queryset
            ok, failed, cancelled = (getattr(obj, f"n_{n}") for n in ("ok", "failed", "cancelled"))
        else:
            counts = batches.batch_counts(batch=obj)
            ok = counts[BatchItem.Status.DONE]
            failed = counts[BatchItem.Status.FAILED]
            cancelled = counts[BatchItem.Status.CANCELLED]
        text = f"{ok} / {obj.total} done"
        if failed:
            text += f", {failed} failed"
        if cancelled:
            text += f", {cancelled} cancelled"
        bar = format_html(
            '<progress max="{}" value="{}">{}</progress> {}',
            obj.total,
            ok + failed + cancelled,
            text,
            text,
        )
        waiting = _batch_wait_text(obj)
        if not waiting:
            return bar
        return format_html('<span class="qa-progress">{} {}</span>', bar, _busy(waiting))

    @admin.display(description="results")
    def results(self, obj: Batch) -> str:
        url = reverse("admin:chat_batch_results", args=[obj.pk])
        return format_html('<a href="{}">Download results (JSONL)</a>', url)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<uuid:pk>/results/",
                self.admin_site.admin_view(self.results_view),
                name="chat_batch_results",
            ),
            path("submit/", self.admin_site.admin_view(self.submit_view), name="chat_batch_submit"),
        ]
        return own + super().get_urls()

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:chat_batch_submit"))

    def results_view(self, request: HttpRequest, pk: Any) -> StreamingHttpResponse:
        from chat.api.batches import batch_ref, results_jsonl

        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        response = StreamingHttpResponse(results_jsonl(batch), content_type="application/jsonl")
        response["Content-Disposition"] = f'attachment; filename="{batch_ref(batch)}.jsonl"'
        return response

    def submit_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = BatchSubmitForm(request.POST or None, tenants=admin_tenants(request))
        if request.method == "POST" and form.is_valid():
            from chat.services import default_sampling

            params = default_sampling()
            if form.cleaned_data["max_tokens"]:
                params = replace(params, max_tokens=form.cleaned_data["max_tokens"])
            try:
                batch = batches.batch_create(
                    tenant=form.cleaned_data["tenant"],
                    name=form.cleaned_data["name"],
                    requests=[
                        batches.BatchRequest(messages=[ChatMessage("user", p)], params=params)
                        for p in form.cleaned_data["prompts"]
                    ],
                    created_by=request.user if request.user.is_authenticated else None,
                )
            except batches.BatchError as error:
                form.add_error("prompts", error.message)
            else:
                self.log_addition(request, batch, [{"added": {}}])
                self.message_user(
                    request,
                    f"Submitted {batch.total} prompt(s); they run at background priority.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:chat_batch_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Submit a batch",
            "form": form,
        }
        return TemplateResponse(request, "admin/chat/batch/submit.html", context)

    @admin.action(description="Cancel selected batches", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        cancelled = 0
        for batch in queryset:
            if batches.batch_cancel(batch=batch):
                self.log_change(request, batch, [{"changed": {"fields": ["Status"]}}])
                cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} batch(es).", messages.SUCCESS)
