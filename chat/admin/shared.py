"""What the chat's admin pages share: who may read which tenants' content on this request,
records nobody edits, and progress text that keeps a page refreshing."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db import models
from django.http import HttpRequest
from django.utils.html import format_html

from chat.content_audit import readable_tenants
from tenants.admin_scope import TenantScopedAdmin

_M = TypeVar("_M", bound=models.Model)
_READABLE_ATTR = "_qassist_readable_tenants"


def readable_ids(request: HttpRequest) -> set[int]:
    """The tenants whose conversations this person may read here (chat/content_audit.py),
    worked out once per request."""
    cached: set[int] | None = getattr(request, _READABLE_ATTR, None)
    if cached is None:
        cached = set(readable_tenants(user=request.user).values_list("id", flat=True))
        setattr(request, _READABLE_ATTR, cached)
    return cached


def reader(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # the admin's pages are behind its login
    return user


class ReadOnlyRecordAdmin(TenantScopedAdmin[_M]):
    """A record of what was said: nobody adds or edits one in the admin."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def busy(text: str) -> str:
    """Progress text marked as unfinished: static/qassist_admin/refresh.js reloads the page
    while one is on it."""
    return format_html('<span class="qa-wait" data-qa-busy="1">{}</span>', text)
