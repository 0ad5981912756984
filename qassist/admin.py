"""django-axes' login records in the admin, read-only, for superusers, under human names.

Registered here instead of by axes (AXES_ENABLE_ADMIN is off): axes' own pages offer a Save
button on records nobody may edit. Deleting a lockout record still lifts the lockout.
"""

from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.http import HttpRequest, HttpResponse


class _ReadOnlySignIns:
    """Superusers only; nobody edits a login record."""

    title = ""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        context = {"title": self.title, **(extra_context or {})}
        response: HttpResponse = super().changelist_view(request, context)  # type: ignore[misc]
        return response


@admin.register(AccessAttempt)
class LoginLockoutAdmin(_ReadOnlySignIns, AccessAttemptAdmin):  # type: ignore[misc]  # axes is untyped
    title = "Login lockouts: failed logins counted per user name and address"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting the record lifts the lockout (as `manage.py axes_reset_username` does).
        return bool(request.user.is_active and request.user.is_superuser)


@admin.register(AccessFailureLog)
class FailedLoginAdmin(_ReadOnlySignIns, AccessFailureLogAdmin):  # type: ignore[misc]  # axes is untyped
    title = "Failed logins"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AccessLog)
class LoginAdmin(_ReadOnlySignIns, AccessLogAdmin):  # type: ignore[misc]  # axes is untyped
    title = "Logins"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
