"""Synced sources in the admin: each with its sync status (last run and its counts, the next
run, failures with their reasons), its documents, "Sync now", and a password that is written
and never shown again. Superusers see every tenant's; a tenant admin their tenants' (a folder
source only under QASSIST_SOURCE_FOLDERS, which the server's administrator sets)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from knowledge.admin import status_text as document_status
from sources import services
from sources.models import Source, SourceItem, SourceRun
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, tenant_filter
from tenants.models import TenantGroup

ITEMS_SHOWN = 200
CHECKED_FIELDS = (
    "kind",
    "location",
    "interval_minutes",
    "max_documents",
    "delay_seconds",
    "concurrency",
)


def _when(value: Any) -> str:
    return date_format(localtime(value), "SHORT_DATETIME_FORMAT") if value else "—"


def _busy(text: str) -> str:
    """Marked unfinished: static/qassist_admin/refresh.js reloads the page until it is done."""
    return format_html('<span class="qa-wait" data-qa-busy="1">{}</span>', text)


def run_text(run: SourceRun) -> str:
    counts = (
        f"{run.seen:,} seen: {run.added:,} added, {run.changed:,} changed, "
        f"{run.unchanged:,} unchanged, {run.removed:,} removed, {run.failed:,} failed"
    )
    if run.status == SourceRun.Status.RUNNING:
        return f"Syncing since {_when(run.started_at)} · {counts}"
    verb = "Synced" if run.status == SourceRun.Status.DONE else "Failed"
    text = f"{verb} {_when(run.finished_at)} · {counts}"
    if run.error:
        text += f" · {run.error}"
    if run.notice:
        text += f" · {run.notice}"
    return text


class SourceForm(forms.ModelForm[Source]):
    password = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Kept encrypted, never shown again. Empty: the kept one stays.",
    )
    forget_password = forms.BooleanField(required=False, label="Forget the kept password")

    class Meta:
        model = Source
        fields = [
            "tenant",
            "name",
            "kind",
            "location",
            "username",
            "limited",
            "groups",
            "enabled",
            "interval_minutes",
            "max_documents",
            "max_total_mb",
            "delay_seconds",
            "concurrency",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
        for group in cleaned.get("groups") or []:
            if tenant is not None and group.tenant_id != tenant.pk:
                self.add_error("groups", f"“{group}” is not a group of {tenant}.")
        if cleaned.get("limited") and not cleaned.get("groups"):
            self.add_error("groups", "Choose the groups whose members may read it.")
        candidate = Source(
            **{name: cleaned.get(name, getattr(self.instance, name)) for name in CHECKED_FIELDS}
        )
        try:
            services.check_source(source=candidate)
        except ValidationError as exc:
            for field_name, errors in exc.message_dict.items():
                if field_name in self.fields:
                    for error in errors:
                        self.add_error(field_name, error)
        return cleaned


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin[Source]):
    form = SourceForm
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    tenant_column_for_one_tenant = False
    list_display = ["name", "tenant", "kind", "location", "sync_status", "documents", "next_run"]
    list_filter = [tenant_filter(), "kind", "enabled"]
    list_select_related = ["tenant"]
    search_fields = ["name", "location"]
    actions = ["sync_selected"]
    readonly_fields = ["status_panel", "failures", "synced_documents"]
    filter_horizontal = ["groups"]

    def get_fieldsets(self, request: HttpRequest, obj: Source | None = None) -> list[Any]:
        where = [
            (None, {"fields": ["tenant", "name", "kind", "location"]}),
            (
                "Credentials (WebDAV, or a site behind a login)",
                {"fields": ["username", "password", "forget_password"]},
            ),
            (
                "Who may read its documents",
                {
                    "fields": ["limited", "groups"],
                    "description": "Off: everyone in the tenant. On: only members of the "
                    "groups chosen (docs/knowledge.md, “Who may read what”).",
                },
            ),
            (
                "Schedule, limits and politeness",
                {
                    "fields": [
                        "enabled",
                        "interval_minutes",
                        "max_documents",
                        "max_total_mb",
                        "delay_seconds",
                        "concurrency",
                    ]
                },
            ),
        ]
        if obj is None:
            return where
        status = ("Sync status", {"fields": ["status_panel", "failures", "synced_documents"]})
        return [status, *where]

    def get_readonly_fields(self, request: HttpRequest, obj: Source | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "tenant"] if obj is not None else fields

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelMultipleChoiceField[Any] | None:
        if db_field.name == "groups":
            tenants = admin_tenants(request)
            groups = TenantGroup.objects.select_related("tenant")
            kwargs["queryset"] = groups if tenants is None else groups.filter(tenant__in=tenants)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    # --- saving, always through the services ----------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Source, form: Any, change: bool) -> None:
        # The admin's transaction holds the first sync back until the groups are set too.
        password = form.cleaned_data.get("password") or None
        if form.cleaned_data.get("forget_password"):
            password = ""
        services.source_save(source=obj, password=password)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        groups = list(form.cleaned_data.get("groups") or [])
        services.source_set_groups(source=form.instance, groups=groups)

    def delete_model(self, request: HttpRequest, obj: Source) -> None:
        services.source_delete(source=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            services.source_delete(source=source)

    # --- columns and panels ---------------------------------------------------------------------

    @admin.display(description="sync")
    def sync_status(self, obj: Source) -> str:
        status = services.source_status(source=obj)
        if status.running is not None:
            return _busy(run_text(status.running))
        if status.last is None:
            return _busy("Waiting for its first sync")
        return run_text(status.last)

    @admin.display(description="documents")
    def documents(self, obj: Source) -> str:
        status = services.source_status(source=obj)
        text = status.documents_text
        return text if status.ready else _busy(text)

    @admin.display(description="next sync")
    def next_run(self, obj: Source) -> str:
        return _when(obj.next_run_at) if obj.enabled else "Off"

    @admin.display(description="status")
    def status_panel(self, obj: Source) -> str:
        status = services.source_status(source=obj)
        lines = []
        if status.running is not None:
            lines.append(_busy(run_text(status.running)))
        if status.last is not None:
            lines.append(format_html("Last run: {}", run_text(status.last)))
        elif status.running is None:
            lines.append(_busy("Waiting for its first sync."))
        documents = status.documents_text
        lines.append(format_html("{}", documents if status.ready else _busy(documents)))
        lines.append(
            format_html("Next sync: {}", _when(status.next_run_at) if obj.enabled else "off")
        )
        sync_url = reverse("admin:sources_source_sync", args=[obj.pk])
        lines.append(
            format_html(
                '<button type="submit" form="sync-now-form" class="button" id="sync-now">'
                'Sync now</button><span hidden><form id="sync-now-form" method="post" '
                'action="{}"></form></span>',
                sync_url,
            )
        )
        return format_html_join("", "<p>{}</p>", ((line,) for line in lines))

    @admin.display(description="failures")
    def failures(self, obj: Source) -> str:
        status = services.source_status(source=obj)
        if not status.failure_count:
            return "None"
        rows = format_html_join(
            "", "<li><code>{}</code>: {}</li>", ((key, error) for key, error in status.failures)
        )
        more = status.failure_count - len(status.failures)
        tail = format_html("<li>… and {} more</li>", more) if more > 0 else ""
        return format_html("<ul class='qa-failures'>{}{}</ul>", rows, tail)

    @admin.display(description="its documents")
    def synced_documents(self, obj: Source) -> str:
        items = (
            SourceItem.objects.filter(source=obj, document__isnull=False)
            .select_related("document")
            .order_by("key")[:ITEMS_SHOWN]
        )
        rows = format_html_join(
            "",
            '<li><a href="{}">{}</a> · <code>{}</code> · {}</li>',
            (
                (
                    reverse("admin:knowledge_document_change", args=[item.document_id]),
                    item.document.title if item.document else "",
                    item.origin,
                    document_status(item.document) if item.document else "",
                )
                for item in items
            ),
        )
        total = SourceItem.objects.filter(source=obj, document__isnull=False).count()
        more = (
            format_html("<p>… and {} more</p>", total - ITEMS_SHOWN) if total > ITEMS_SHOWN else ""
        )
        return format_html('<ul class="qa-source-documents">{}</ul>{}', rows, more)

    # --- syncing on demand ----------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/sync/",
                self.admin_site.admin_view(self.sync_view),
                name="sources_source_sync",
            )
        ]
        return own + super().get_urls()

    def sync_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        source = self.get_object(request, object_id)
        if source is None or not self.has_view_permission(request, source):
            raise Http404("No such source.")
        back = HttpResponseRedirect(reverse("admin:sources_source_change", args=[source.pk]))
        if request.method != "POST" or not self.has_change_permission(request, source):
            return back
        self._sync(request, [source])
        return back

    def _sync(self, request: HttpRequest, sources: list[Source]) -> None:
        for source in sources:
            run = services.source_sync_now(source=source)
            self.log_change(request, source, f"Sync asked for (run {run.pk}).")
        self.message_user(
            request,
            f"Syncing {len(sources)} source(s): this page follows its progress.",
            messages.SUCCESS,
        )

    @admin.action(description="Sync selected sources now", permissions=["change"])
    def sync_selected(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        self._sync(request, list(queryset))
