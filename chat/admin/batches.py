"""Batches: many prompts answered in the background at low priority, their progress and results."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from chat import batches
from chat.admin.shared import busy
from chat.models import (
    Batch,
    BatchItem,
)
from chat.progress import batch_outlook, duration_text
from inference.service import engine_mode
from inference.types import ChatMessage
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, tenant_filter
from tenants.models import Tenant


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
        return format_html('<span class="qa-progress">{} {}</span>', bar, busy(waiting))

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
            from chat.services.sampling import default_sampling

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
