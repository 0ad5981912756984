"""Cached replies (curated answers served without the model: edit, test a phrase, CSV export
and import) and their candidates (frequent first questions, drafts by the model)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from chat import cached_replies, cached_reply_csv
from chat.admin.shared import busy, readable_ids, reader
from chat.content_audit import content_search_record
from chat.models import (
    CachedReply,
    CachedReplyCandidate,
    CachedReplyImport,
)
from chat.progress import draft_outlook, duration_text
from chat.question_keys import reply_keys
from chat.tasks import draft_dispatch
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, tenant_filter
from tenants.models import Tenant


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
        raise cached_reply_csv.CachedReplyImportError(
            ["The file is not UTF-8 text: save it as “CSV UTF-8” and try again."]
        ) from None


def _imported(result: cached_reply_csv.ImportResult) -> str:
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
            cached_reply_csv.cached_replies_export(replies=replies),
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
                cached_reply_csv.check_import_size(size=upload.size or 0)
                text = _utf8(upload.read())
                if (
                    cached_reply_csv.import_row_count(text)
                    > cached_reply_csv.IMPORT_INLINE_MAX_ROWS
                ):
                    job = cached_reply_csv.cached_reply_import_create(
                        text=text, user=user, file_name=upload.name or ""
                    )
                    return HttpResponseRedirect(
                        reverse("admin:chat_cachedreply_import_status", args=[job.pk])
                    )
                result = cached_reply_csv.cached_replies_import(
                    text=text, tenants=admin_tenants(request), user=user
                )
            except cached_reply_csv.CachedReplyImportError as error:
                errors = error.errors
            else:
                self.message_user(request, _imported(result), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:chat_cachedreply_changelist"))
        max_bytes, max_rows = cached_reply_csv.import_limits()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Import cached replies from CSV",
            "form": form,
            "errors": errors,
            "columns": cached_reply_csv.CSV_COLUMNS,
            "record_columns": cached_reply_csv.RECORD_COLUMNS,
            "max_mb": max_bytes // 2**20,
            "max_rows": max_rows,
            "inline_rows": cached_reply_csv.IMPORT_INLINE_MAX_ROWS,
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
    tenant_column_for_one_tenant = False
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

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[CachedReplyCandidate], search_term: str
    ) -> tuple[QuerySet[CachedReplyCandidate], bool]:
        # Under a tenant's content audit the list holds its rare questions too (one person's
        # words): a search through them is a reading of content, logged like one.
        term = search_term.strip()
        readable = readable_ids(request)
        if term and readable:
            content_search_record(
                reader=reader(request), tenants=Tenant.objects.filter(id__in=readable), query=term
            )
        return super().get_search_results(request, queryset, search_term)

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
            return busy(" · ".join(parts))
        if obj.draft_status == status.RUNNING:
            outlook = draft_outlook(obj)
            parts = [f"Drafting… {len(obj.draft_answer):,} characters so far"]
            if outlook.seconds_left is not None:
                parts.append(f"{duration_text(outlook.seconds_left)} left")
            return busy(" · ".join(parts))
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
