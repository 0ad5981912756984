"""Tenant admins in their own lane: what a non-superuser sees and may do in the Django admin.

Superusers see everything. Every other staff user sees only the tenants they administer (their
membership's role is "tenant admin", see `tenants_administered_by`), whatever Django model
permissions they hold: querysets, object pages, foreign-key choices, list filters and
autocomplete all go through the same scope, so another tenant's name never appears, and an
object of another tenant is "not found" exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.db.models import QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest

from tenants.models import ApiKey, Tenant
from tenants.services import tenants_administered_by

_M = TypeVar("_M", bound=models.Model)

_SCOPE_ATTR = "_qassist_admin_tenants"


def admin_tenants(request: HttpRequest) -> QuerySet[Tenant] | None:
    """The tenants `request.user` may see in the admin; None for a superuser (all of them).
    Evaluated once per request: one query, however many widgets ask."""
    user = request.user
    if user.is_active and user.is_superuser:
        return None
    cached: QuerySet[Tenant] | None = getattr(request, _SCOPE_ATTR, None)
    if cached is None:
        ids = list(tenants_administered_by(user=user).values_list("id", flat=True))
        cached = Tenant.objects.filter(id__in=ids)
        setattr(request, _SCOPE_ATTR, cached)
    return cached


def admin_tenant_slugs(request: HttpRequest) -> frozenset[str] | None:
    """The slugs of `admin_tenants`, for numbers kept by slug (refusals, requests by tenant in
    /metrics and the engine page); None for a superuser (all of them)."""
    tenants = admin_tenants(request)
    if tenants is None:
        return None
    return frozenset(tenants.values_list("slug", flat=True))


def is_tenant_admin(request: HttpRequest) -> bool:
    """A non-superuser who administers at least one tenant."""
    tenants = admin_tenants(request)
    return tenants is not None and tenants.exists()


def scope_queryset(queryset: QuerySet[_M], request: HttpRequest, tenant_path: str) -> QuerySet[_M]:
    tenants = admin_tenants(request)
    if tenants is None:
        return queryset
    return queryset.filter(**{f"{tenant_path}__in": tenants})


def scoped_choices(model: type[models.Model], request: HttpRequest) -> QuerySet[Any] | None:
    """What a foreign key to `model` may point at for this user; None: leave the default."""
    tenants = admin_tenants(request)
    if tenants is None:
        return None
    if model is Tenant:
        return tenants.order_by("slug")
    if model is ApiKey:
        return ApiKey.objects.filter(tenant__in=tenants)
    if model is User:
        return User.objects.filter(memberships__tenant__in=tenants).distinct()
    from chat.models import ChatSession  # chat depends on tenants, not the other way round

    if model is ChatSession:
        return ChatSession.objects.filter(tenant__in=tenants)
    return None


# What the admin's list filters put in a list's URL after a declared field path: the filters
# for booleans, choices, dates and foreign keys, and a date hierarchy's parts.
FILTER_LOOKUPS = ("exact", "isnull", "gte", "lt", "id__exact", "pk__exact")
DATE_PARTS = ("year", "month", "day")


def declared_lookups(model_admin: admin.ModelAdmin[Any], request: HttpRequest | None) -> set[str]:
    """The URL lookups a list declares: each list filter's own parameters and its date
    hierarchy's, nothing else."""
    allowed: set[str] = set()
    items = model_admin.get_list_filter(request) if request is not None else model_admin.list_filter
    for item in items:
        if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
            allowed.add(str(item.parameter_name))
            continue
        path = item[0] if isinstance(item, list | tuple) else item
        if isinstance(path, str):
            allowed |= {path, *(f"{path}__{lookup}" for lookup in FILTER_LOOKUPS)}
    hierarchy = model_admin.date_hierarchy
    if hierarchy:
        allowed |= {f"{hierarchy}__{part}" for part in DATE_PARTS}
    return allowed


class TenantScopedAdmin(admin.ModelAdmin[_M]):
    """A ModelAdmin whose rows belong to a tenant through `tenant_path`.

    Its lists take only the lookups they declare (their list filters and date hierarchy) from
    the URL. Django's own rule lets any lookup on the model's own fields through
    (`?content__icontains=…`, `?title__gte=…`): the count of rows then answers yes or no, and a
    tenant admin rebuilt a member's 44-character message in 622 requests with nothing logged
    (issue #32). Text is searched only by the search box, under the content audit
    (chat/admin/records.py)."""

    tenant_path: ClassVar[str] = "tenant"
    # What a tenant admin may do here (viewing is always allowed).
    tenant_admin_can_add: ClassVar[bool] = False
    tenant_admin_can_change: ClassVar[bool] = True
    tenant_admin_can_delete: ClassVar[bool] = False
    # False: a staff member who runs one tenant sees no "tenant" column in the list (it would
    # say the same on every row).
    tenant_column_for_one_tenant: ClassVar[bool] = True

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Anything else is DisallowedModelAdminLookup: a 400, logged by django.security.
        return lookup in declared_lookups(self, request)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = list(super().get_list_display(request))
        if not self.tenant_column_for_one_tenant and "tenant" in columns:
            tenants = admin_tenants(request)
            if tenants is not None and tenants.count() == 1:
                columns.remove("tenant")
        return columns

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        return scope_queryset(super().get_queryset(request), request, self.tenant_path)

    def _in_scope(self, request: HttpRequest, obj: _M | None) -> bool:
        if obj is None:
            return True
        return scope_queryset(
            self.model._default_manager.filter(pk=obj.pk), request, self.tenant_path
        ).exists()

    def _tenant_admin_may(self, request: HttpRequest, allowed: bool, obj: _M | None) -> bool:
        return allowed and is_tenant_admin(request) and self._in_scope(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        if request.user.is_superuser:
            return super().has_module_permission(request)
        return is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if request.user.is_superuser:
            return super().has_view_permission(request, obj)
        return self._tenant_admin_may(request, True, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        if request.user.is_superuser:
            return super().has_add_permission(request, *args)
        return self._tenant_admin_may(request, self.tenant_admin_can_add, None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if request.user.is_superuser:
            return super().has_change_permission(request, obj)
        return self._tenant_admin_may(request, self.tenant_admin_can_change, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if request.user.is_superuser:
            return super().has_delete_permission(request, obj)
        return self._tenant_admin_may(request, self.tenant_admin_can_delete, obj)

    def get_autocomplete_fields(self, request: HttpRequest) -> list[str]:
        fields = list(super().get_autocomplete_fields(request))
        if request.user.is_superuser:
            return fields
        # The user admin is the superusers' (it lists every account): tenant admins get a
        # select of their own tenants' people instead.
        return [name for name in fields if name != "user"]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelChoiceField[Any] | None:
        choices = scoped_choices(db_field.remote_field.model, request)
        if choices is not None:
            kwargs["queryset"] = choices
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def tenant_filter(path: str = "tenant") -> tuple[str, type[admin.RelatedOnlyFieldListFilter]]:
    """A list filter offering only the tenants of the rows this user can see."""
    return (path, admin.RelatedOnlyFieldListFilter)


class ScopedTenantFilter(admin.RelatedFieldListFilter):
    """The tenants this user may see, for lists too big to scan for the tenants present."""

    def field_choices(
        self, field: Any, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, Any]]:
        tenants = admin_tenants(request)
        choices = Tenant.objects.all() if tenants is None else tenants
        return [(str(tenant.pk), str(tenant)) for tenant in choices.order_by("slug")]
