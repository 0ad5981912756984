from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import CharField, Q, QuerySet, Subquery
from django.db.models.functions import Cast
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from tenants.admin_scope import (
    ScopedTenantFilter,
    TenantScopedAdmin,
    admin_tenants,
    is_tenant_admin,
    tenant_filter,
)
from tenants.admin_usage import usage_page
from tenants.models import (
    ApiKey,
    Membership,
    PromptSuggestion,
    Tenant,
    TenantGroup,
    UsageDailyReason,
    UsageRecord,
)
from tenants.services import (
    MAX_SUGGESTIONS,
    ApiKeyStatus,
    api_key_create,
    api_key_filter_by_status,
    api_key_revoke,
    api_key_status,
    check_tenant_models,
    check_tenant_slug,
    deployment_models,
    tenant_group_members,
    tenant_group_save,
    tenant_group_set_members,
    tenant_set_active,
    tenant_stamp_content_audit,
    usage_period_start,
    usage_tokens_in_period,
    usage_totals,
)
from tenants.usage import usage_records_csv

# What only superusers set: a tenant admin who could raise them would have no limits at all.
SUPERUSER_FIELDS = [
    "slug",
    "active",
    "priority",
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_streams",
    "daily_token_quota",
    "monthly_token_quota",
    # Opening the tenant's conversations to its admins is not theirs to decide (docs/privacy.md).
    "content_audit",
    # A bigger model costs the machine several times a smaller one's (issue #36).
    "default_model",
    "allowed_models",
]
LIMIT_FIELDS = SUPERUSER_FIELDS[1:-2]


class MembershipInline(admin.TabularInline[Membership, Tenant]):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]


class PromptSuggestionInline(admin.TabularInline[PromptSuggestion, Tenant]):
    """The suggestions of the tenant's new chats: its admins edit them (none: the built-in
    four)."""

    model = PromptSuggestion
    extra = 0
    max_num = MAX_SUGGESTIONS
    fields = ["position", "title", "prompt"]
    verbose_name_plural = "Prompt suggestions (a new chat shows these; none: the built-in four)"

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "prompt":
            kwargs["widget"] = forms.Textarea(attrs={"rows": 2, "cols": 60})
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    # The tenant's page is scoped already: a tenant admin sees only their own tenants there.
    def _allowed(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser) or is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)


def _model_choices() -> list[tuple[str, str]]:
    return [(m, m) for m in deployment_models()]


class TenantAdminForm(forms.ModelForm[Tenant]):
    # Chosen among the models this deployment serves (QASSIST_MODELS), read when the form is
    # built so a settings change shows at once.
    default_model = forms.TypedChoiceField(
        choices=(), required=False, help_text=Tenant._meta.get_field("default_model").help_text
    )
    allowed_models = forms.MultipleChoiceField(
        choices=(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=Tenant._meta.get_field("allowed_models").help_text,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offered = _model_choices()
        default_field = self.fields.get("default_model")  # absent where read-only
        if isinstance(default_field, forms.ChoiceField):
            default_field.choices = [("", f"the deployment's default ({offered[0][0]})"), *offered]
        allowed_field = self.fields.get("allowed_models")
        if isinstance(allowed_field, forms.ChoiceField):
            allowed_field.choices = offered

    def clean_slug(self) -> str:
        slug: str = self.cleaned_data["slug"]
        if "slug" in self.changed_data:  # a tenant made before the rule keeps its slug
            check_tenant_slug(slug)
        return slug

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            check_tenant_models(
                default_model=cleaned.get("default_model") or "",
                allowed_models=list(cleaned.get("allowed_models") or []),
            )
        except ValidationError as exc:
            self.add_error("allowed_models", exc)
        return cleaned


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin[Tenant]):
    tenant_path = "pk"
    form = TenantAdminForm
    list_display = [
        "slug",
        "name",
        "usage_link",
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
    readonly_fields = [
        "created_at",
        "updated_at",
        "usage_today",
        "usage_this_month",
        "content_audit_by",
        "content_audit_since",
    ]
    inlines = [MembershipInline]
    actions = ["deactivate_selected", "activate_selected"]
    fieldsets = [
        (None, {"fields": ["name", "slug", "active", "priority", "system_prompt"]}),
        ("Models", {"fields": ["default_model", "allowed_models"]}),
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
        (
            "Privacy",
            {
                "fields": ["content_audit", "content_audit_by", "content_audit_since"],
                "description": "Without the content audit nobody reads this tenant's "
                "conversations in the admin, superusers included: it shows who used qassist, "
                "when and how much. With it, superusers and the tenant's admins can read them, "
                "every reading is logged (Content reads), and members see a notice in the chat.",
            },
        ),
        ("Usage", {"fields": ["usage_today", "usage_this_month"]}),
        ("Audit", {"fields": ["created_at", "updated_at"]}),
    ]

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/usage/",
                self.admin_site.admin_view(self.usage_view),
                name="tenants_tenant_usage",
            )
        ]
        return own + super().get_urls()

    def usage_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tenant = self.get_object(request, object_id)
        if tenant is None or not self.has_view_permission(request, tenant):
            raise Http404("No such tenant.")
        return usage_page(request, admin_site=self.admin_site, tenant=tenant)

    @admin.display(description="usage")
    def usage_link(self, obj: Tenant) -> str:
        return format_html(
            '<a href="{}">charts</a>', reverse("admin:tenants_tenant_usage", args=[obj.pk])
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += SUPERUSER_FIELDS
        return fields

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        if "content_audit" in form.changed_data:
            tenant_stamp_content_audit(tenant=obj, by=request.user)
        super().save_model(request, obj, form, change)

    def get_prepopulated_fields(
        self, request: HttpRequest, obj: Tenant | None = None
    ) -> dict[str, Any]:
        if not request.user.is_superuser:
            return {}  # the slug is read-only for them
        return dict(super().get_prepopulated_fields(request, obj))

    def get_inlines(self, request: HttpRequest, obj: Tenant | None) -> list[Any]:
        # knowledge and signin depend on tenants, not the other way round: imported here.
        from knowledge.admin import KnowledgeBaseInline
        from signin.admin import GroupMappingInline

        # Tenant admins manage people on the Memberships page, where users are scoped; which
        # groups give a tenant (and its admins) is the superusers' to decide.
        people = [*self.inlines, GroupMappingInline] if request.user.is_superuser else []
        return [*people, KnowledgeBaseInline, PromptSuggestionInline]

    def has_limits_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> list[dict[str, Any]]:
        """Django's message names the changed fields; for limits it also says from what to what,
        so the history answers "who raised acme's quota, and from how much"."""
        message: list[dict[str, Any]] = super().construct_change_message(
            request, form, formsets, add
        )
        if add:
            return message
        for entry in message:
            changed = entry.get("changed")
            if changed and "fields" in changed and "name" not in changed:
                changed["fields"] = [
                    self._describe_change(form, label) for label in changed["fields"]
                ]
        return message

    @staticmethod
    def _describe_change(form: Any, label: str) -> str:
        for name in LIMIT_FIELDS:
            if name in form.changed_data and form.fields[name].label == label:
                before = form.initial.get(name)
                after = form.cleaned_data.get(name)
                return f"{label} ({_limit_text(before)} → {_limit_text(after)})"
        return label

    @admin.action(description="Deactivate selected tenants", permissions=["limits"])
    def deactivate_selected(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        self._set_active(request, queryset, active=False)

    @admin.action(description="Activate selected tenants", permissions=["limits"])
    def activate_selected(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        self._set_active(request, queryset, active=True)

    def _set_active(self, request: HttpRequest, queryset: QuerySet[Tenant], active: bool) -> None:
        changed = 0
        for tenant in queryset:
            if tenant_set_active(tenant=tenant, active=active):
                label = f"Active ({_limit_text(not active)} → {_limit_text(active)})"
                self.log_change(request, tenant, [{"changed": {"fields": [label]}}])
                changed += 1
        verb = "Activated" if active else "Deactivated"
        self.message_user(request, f"{verb} {changed} tenant(s).", messages.SUCCESS)

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
        # Quotas count each model's tokens by its weight (QASSIST_MODEL_TOKEN_WEIGHTS).
        counted = usage_tokens_in_period(tenant_id=obj.pk, period=period)
        if counted != totals["total_tokens"]:
            text += f"; {counted:,} as quotas count them (model weights)"
        if quota:
            text += f"; {counted / quota:.0%} of the {quota:,} token quota"
        return text


def _limit_text(value: object) -> str:
    if value is None or value == "":
        return "no limit"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,}" if isinstance(value, int) else str(value)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin[Membership]):
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", tenant_filter()]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
    readonly_fields = ["created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        # A membership moved to someone else or another tenant is a new membership.
        return ["user", "tenant", "created_at"] if obj is not None else ["created_at"]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField[Any] | None:
        if db_field.name == "user" and not request.user.is_superuser:
            # Tenant admins add an existing account by its exact username: they see no list
            # of everyone's accounts (which would show who works for other tenants).
            return forms.ModelChoiceField(
                queryset=User.objects.filter(is_active=True),
                to_field_name="username",
                widget=forms.TextInput,
                label="Username",
                help_text="The exact username of an existing account.",
                error_messages={"invalid_choice": "There is no active account with this username."},
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TenantGroupForm(forms.ModelForm[TenantGroup]):
    members = forms.ModelMultipleChoiceField(
        queryset=User.objects.none(),
        required=False,
        widget=FilteredSelectMultiple("members", is_stacked=False),
        help_text="Members of the tenant. People who sign in through the identity provider "
        "can be put in it from their groups there instead (Tenant group mappings).",
    )

    class Meta:
        model = TenantGroup
        fields = ["tenant", "name"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant") or (self.instance.tenant if self.instance.pk else None)
        for user in cleaned.get("members") or []:
            if tenant is not None and not Membership.objects.filter(user=user, tenant=tenant):
                self.add_error("members", f"{user.get_username()} is not a member of {tenant}.")
        return cleaned


@admin.register(TenantGroup)
class TenantGroupAdmin(TenantScopedAdmin[TenantGroup]):
    """A tenant's groups: documents (and synced sources) limited to one are read only by its
    members (docs/knowledge.md, "Who may read what"). Tenant admins keep their tenants'."""

    form = TenantGroupForm
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    list_display = ["name", "tenant", "member_count", "document_count"]
    list_filter = [tenant_filter()]
    list_select_related = ["tenant", "group"]
    search_fields = ["name", "tenant__slug"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: TenantGroup | None = None
    ) -> list[str]:
        return ["tenant"] if obj is not None else []

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        people = (
            User.objects.filter(
                is_active=True,
                memberships__tenant__in=(
                    [obj.tenant_id]
                    if obj is not None
                    else (admin_tenants(request) or Tenant.objects.all())
                ),
            )
            .distinct()
            .order_by("username")
        )
        members = form.base_fields["members"]
        assert isinstance(members, forms.ModelMultipleChoiceField)
        members.queryset = people
        if obj is not None:
            form.base_fields["members"].initial = list(tenant_group_members(group=obj))
        return form

    def save_model(self, request: HttpRequest, obj: TenantGroup, form: Any, change: bool) -> None:
        tenant_group_save(group=obj)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        tenant_group_set_members(group=form.instance, users=list(form.cleaned_data["members"]))

    @admin.display(description="members")
    def member_count(self, obj: TenantGroup) -> int:
        return obj.group.user_set.count()

    @admin.display(description="documents limited to it")
    def document_count(self, obj: TenantGroup) -> int:
        return obj.documents.count()


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
class ApiKeyAdmin(TenantScopedAdmin[ApiKey]):
    """Keys are made by api_key_create: the add form asks only what a person decides. The new
    key is shown once, on the page the add form redirects to (reloading that page, or the add
    form's answer, makes no second key and shows the key no more)."""

    tenant_admin_can_add = True

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
    list_filter = [ApiKeyStatusFilter, tenant_filter(), "expires_at"]
    list_select_related = ["tenant"]
    search_fields = ["prefix", "name", "tenant__slug"]
    autocomplete_fields = ["tenant"]
    actions = ["revoke_selected"]
    add_fields = ["tenant", "name", "expires_at", "document_scope", "groups"]
    change_fields = [
        "tenant",
        "prefix",
        "status",
        "name",
        "expires_at",
        "document_scope",
        "groups",
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

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelMultipleChoiceField[Any] | None:
        if db_field.name == "groups":
            tenants = admin_tenants(request)
            groups = TenantGroup.objects.select_related("tenant")
            kwargs["queryset"] = groups if tenants is None else groups.filter(tenant__in=tenants)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if not change:
            # The key was made by api_key_create (save_model): `form.instance` is it.
            form.instance = ApiKey.objects.get(pk=form.instance.pk)
        chosen = [
            g
            for g in form.cleaned_data.get("groups") or []
            if g.tenant_id == form.instance.tenant_id
        ]
        form.instance.groups.set(chosen)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        api_key, raw_key = api_key_create(
            tenant=obj.tenant,
            name=obj.name,
            created_by=request.user if request.user.is_authenticated else None,
            expires_at=obj.expires_at,
            document_scope=obj.document_scope,
        )
        # The admin goes on with `obj` (log entry, then response_add): make it the saved key.
        obj.pk = api_key.pk
        obj.refresh_from_db()
        obj._state.adding = False
        new_key_stash(request, api_key=api_key, raw_key=raw_key)

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        # Post/Redirect/Get: the answer to the form is a redirect, so a reload never posts the
        # form again (which would make a second key).
        return HttpResponseRedirect(reverse("admin:tenants_apikey_created", args=[obj.pk]))

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/created/",
                self.admin_site.admin_view(self.created_view),
                name="tenants_apikey_created",
            )
        ]
        return own + super().get_urls()

    def created_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The new key, once: the first GET after the add form takes it out of the session;
        any later one says it cannot be shown again."""
        api_key = self.get_object(request, object_id)
        if api_key is None or not self.has_view_permission(request, api_key):
            raise Http404("No such API key.")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "api_key": api_key,
            "raw_key": new_key_take(request, api_key=api_key),
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


# The raw key between the add form's POST and the GET it redirects to, in the session (stored
# server-side in the database, never in a cookie: SESSION_ENGINE is Django's default). Taken
# out by that GET; a stash older than NEW_KEY_SECONDS is dropped unseen.
NEW_KEY_SESSION = "qassist_new_api_key"
NEW_KEY_SECONDS = 600


def new_key_stash(request: HttpRequest, *, api_key: ApiKey, raw_key: str) -> None:
    request.session[NEW_KEY_SESSION] = {
        "id": api_key.pk,
        "key": raw_key,
        "at": timezone.now().timestamp(),
    }


def new_key_take(request: HttpRequest, *, api_key: ApiKey) -> str | None:
    """The raw key of `api_key` if it waits in the session (then no longer), else None."""
    stash = request.session.get(NEW_KEY_SESSION)
    if not isinstance(stash, dict) or stash.get("id") != api_key.pk:
        return None  # another key's (another tab): left for its own page
    del request.session[NEW_KEY_SESSION]
    fresh = timezone.now().timestamp() - float(stash.get("at", 0)) < NEW_KEY_SECONDS
    raw = stash.get("key")
    return raw if fresh and isinstance(raw, str) else None


class UsageReasonFilter(admin.SimpleListFilter):
    """Reasons as the daily roll-up knows them (a small table), not a scan of the records."""

    title = "reason"
    parameter_name = "reason"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> Iterable[tuple[str, str]]:
        reasons = {"background", "batch"}
        rows = UsageDailyReason.objects.order_by().values_list("reason", flat=True).distinct()
        reasons.update(reason for reason in rows if reason)
        return [(reason, reason) for reason in sorted(reasons)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(reason=self.value()) if self.value() else queryset


@admin.register(UsageRecord)
class UsageRecordAdmin(TenantScopedAdmin[UsageRecord]):
    change_list_template = "admin/tenants/usagerecord/change_list.html"
    actions = ["export_csv"]
    list_display = [
        "created_at",
        "tenant",
        "user",
        "api_key",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "ttft_ms",
        "latency_ms",
        "status",
        "reason",
    ]
    # Millions of rows: no filter may scan them for its choices (no date hierarchy, no
    # distinct values), and the list does not count the unfiltered table a second time.
    list_filter = [
        "status",
        UsageReasonFilter,
        "cached",
        ("tenant", ScopedTenantFilter),
        "created_at",
    ]
    show_full_result_count = False
    list_select_related = ["tenant", "user", "api_key"]
    search_fields = ["tenant__slug", "user__username", "api_key__prefix"]
    readonly_fields = [
        "tenant",
        "user",
        "api_key",
        "session",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "ttft_ms",
        "latency_ms",
        "status",
        "reason",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False  # usage is recorded, never typed in

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nor edited: its page has no Save button

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="tenants_usagerecord_dashboard",
            )
        ]
        return own + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise Http404("No usage to show.")
        return usage_page(request, admin_site=self.admin_site, tenant=None)

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(
        self, request: HttpRequest, queryset: QuerySet[UsageRecord]
    ) -> StreamingHttpResponse:
        """Filter the list, tick "select all", run this: the whole filtered view, streamed."""
        response = StreamingHttpResponse(
            usage_records_csv(records=queryset.order_by("created_at", "id")),
            content_type="text/csv; charset=utf-8",
        )
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="usage-records-{stamp}.csv"'
        return response


def _audited_models() -> list[tuple[type[models.Model], str]]:
    """Models whose admin history is a tenant's audit trail, and the path to their tenant."""
    from chat.models import CachedReply
    from knowledge.models import Document

    return [
        (Tenant, "pk"),
        (Membership, "tenant"),
        (ApiKey, "tenant"),
        (CachedReply, "tenant"),
        (Document, "tenant"),
    ]


class PkText(Cast):
    """A primary key as `LogEntry.object_id` holds it (`str(pk)`). A UUID keeps its hyphens,
    which SQLite's column stores without (PostgreSQL's cast writes them)."""

    def __init__(self, expression: Any, *, uuid: bool) -> None:
        super().__init__(expression, output_field=CharField())
        self.uuid = uuid

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        if not self.uuid:
            return super().as_sqlite(compiler, connection, **extra_context)
        sql, params = compiler.compile(self.source_expressions[0])
        spans = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
        parts = [f"substr({sql}, {start}, {length})" for start, length in spans]
        return " || '-' || ".join(parts), list(params) * len(spans)


@admin.register(LogEntry)
class AuditTrailAdmin(admin.ModelAdmin[LogEntry]):
    """The admin's history as the audit trail: who changed what (limits with old and new
    values), when. Read-only; tenant admins see only entries about their tenants' objects."""

    list_display = ["action_time", "user", "content_type", "object_repr", "action", "change"]
    list_filter = ["action_flag", "content_type"]
    search_fields = ["object_repr", "change_message", "user__username"]
    date_hierarchy = "action_time"
    list_select_related = ["user", "content_type"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[LogEntry]:
        entries = super().get_queryset(request)
        tenants = admin_tenants(request)
        if tenants is None:
            return entries
        about_theirs = Q(pk__in=[])
        for model, tenant_path in _audited_models():
            ids = (
                model._default_manager.filter(**{f"{tenant_path}__in": tenants})
                .annotate(
                    _object_id=PkText("pk", uuid=isinstance(model._meta.pk, models.UUIDField))
                )
                .values("_object_id")
            )
            about_theirs |= Q(
                content_type=ContentType.objects.get_for_model(model),
                object_id__in=Subquery(ids),
            )
        return entries.filter(about_theirs)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        context = {"title": "Admin history: who changed what, and when", **(extra_context or {})}
        return super().changelist_view(request, context)

    @admin.display(description="action")
    def action(self, obj: LogEntry) -> str:
        return {1: "added", 2: "changed", 3: "deleted"}.get(obj.action_flag, "?")

    @admin.display(description="change")
    def change(self, obj: LogEntry) -> str:
        return obj.get_change_message()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser) or is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if request.user.is_superuser:
            return True
        return is_tenant_admin(request) and (
            obj is None or self.get_queryset(request).filter(pk=obj.pk).exists()
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
