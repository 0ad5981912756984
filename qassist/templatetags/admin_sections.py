"""Breadcrumbs named as the admin home names its sections (qassist.admin_site): a list's
breadcrumb said "Company knowledge" or "Chat" (the app) where the home says "Knowledge and
cached replies" or "Conversations and audit" (issue #31)."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from qassist.admin_site import ADMIN_SECTIONS, ENTRY_NAMES, AdminLink

register = template.Library()


@register.simple_tag
def admin_section(opts: Any) -> dict[str, str]:
    """The home's section of a model (`opts`: its _meta) as {name, url, models}: its name
    and anchor on the home, and the model's name as the home lists it."""
    entry = (opts.app_label, opts.model_name)
    models = ENTRY_NAMES.get(entry, str(opts.verbose_name_plural).capitalize())
    for section in ADMIN_SECTIONS:
        if any(not isinstance(e, AdminLink) and e == entry for e in section.entries):
            url = f"{reverse('admin:index')}#section-{section.label}"
            return {"name": section.name, "url": url, "models": models}
    url = reverse("admin:app_list", kwargs={"app_label": opts.app_label})
    return {"name": str(opts.app_config.verbose_name), "url": url, "models": models}
