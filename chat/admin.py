from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from chat import batches, cached_replies
from chat.models import Batch, BatchItem, CachedReply, CachedReplyCandidate, ChatSession, Message
from chat.tasks import draft_dispatch
from inference.service import engine_mode
from inference.types import ChatMessage
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, is_tenant_admin, tenant_filter
from tenants.models import Tenant


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
        if not (self.has_add_permission(request) and self.has_change_permission(request)):
            raise PermissionDenied
        form = CsvImportForm(request.POST or None, request.FILES or None)
        errors: list[str] = []
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                errors = ["The file is not UTF-8 text: save it as “CSV UTF-8” and try again."]
            else:
                try:
                    result = cached_replies.cached_replies_import(
                        text=text,
                        tenants=admin_tenants(request),
                        user=request.user if request.user.is_authenticated else None,
                    )
                except cached_replies.CachedReplyImportError as error:
                    errors = error.errors
                else:
                    self.message_user(
                        request,
                        f"Imported {result.created + result.updated} cached reply(ies): "
                        f"{result.created} new, {result.updated} updated.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(reverse("admin:chat_cachedreply_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Import cached replies from CSV",
            "form": form,
            "errors": errors,
            "columns": cached_replies.CSV_COLUMNS,
        }
        return TemplateResponse(request, "admin/chat/cachedreply/import.html", context)

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
        "draft_status",
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
        "draft_status",
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
        "draft_status",
        "draft_error",
        "promoted_to",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False  # candidates are counted from real conversations

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = list(super().get_list_display(request))
        tenants = admin_tenants(request)
        if tenants is not None and tenants.count() == 1:
            columns.remove("tenant")  # one tenant: the column would say the same on every row
        return columns

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
            f"Drafting {started} answer(s) at background priority: replies people wait for "
            "go first. Reload this page to see the drafts."
        )
        if skipped:
            message += f" {skipped} already being drafted."
        self.message_user(request, message, messages.SUCCESS)


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
        return format_html(
            '<progress max="{}" value="{}">{}</progress> {}',
            obj.total,
            ok + failed + cancelled,
            text,
            text,
        )

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

    @admin.action(description="Cancel selected batches", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        cancelled = 0
        for batch in queryset:
            if batches.batch_cancel(batch=batch):
                self.log_change(request, batch, [{"changed": {"fields": ["Status"]}}])
                cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} batch(es).", messages.SUCCESS)
