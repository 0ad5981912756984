"""Single sign-on in the admin, for superusers: each tenant's group mappings (also inline on
the tenant's page) and the identities the provider signed in. Tenant admins see neither: a
mapping decides who administers a tenant, which is not a tenant admin's to widen."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from signin.models import GroupMapping, Identity, TenantGroupMapping
from tenants.models import Tenant


def _superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_superuser)


class GroupMappingInline(admin.TabularInline[GroupMapping, Tenant]):
    model = GroupMapping
    extra = 1
    verbose_name = "identity-provider group"
    verbose_name_plural = "members from identity-provider groups"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin[GroupMapping]):
    list_display = ["group", "tenant", "role"]
    list_filter = ["role", "tenant"]
    search_fields = ["group", "tenant__slug", "tenant__name"]
    autocomplete_fields = ["tenant"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin[Identity]):
    list_display = ["user", "subject", "email", "last_checked_at", "refused_at"]
    list_filter = ["issuer"]
    search_fields = ["user__username", "subject", "email"]
    readonly_fields = [
        "user",
        "issuer",
        "subject",
        "email",
        "groups",
        "created_at",
        "last_checked_at",
        "refused_at",
        "staff_from_groups",
    ]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # identities come from sign-ins

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting an identity leaves its account; the next sign-in would make a new one.
        return False


@admin.register(TenantGroupMapping)
class TenantGroupMappingAdmin(admin.ModelAdmin[TenantGroupMapping]):
    """Which identity-provider groups put people in which tenant group (documents limited to
    it are theirs to read). Superusers only, like the tenant mappings."""

    list_display = ["group", "tenant_group", "tenant"]
    list_select_related = ["tenant_group__tenant"]
    search_fields = ["group", "tenant_group__name", "tenant_group__tenant__slug"]

    @admin.display(description="tenant")
    def tenant(self, obj: TenantGroupMapping) -> str:
        return str(obj.tenant_group.tenant)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)
