"""A group deleted (in the admin, or with its Django group or its tenant) leaves the documents
limited to it: they are read by nobody until staff choose again, never by everyone."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, pre_delete

_AFFECTED = "_qassist_documents"


def _before(sender: Any, instance: Any, **kwargs: Any) -> None:
    setattr(instance, _AFFECTED, list(instance.documents.values_list("id", flat=True)))


def _after(sender: Any, instance: Any, **kwargs: Any) -> None:
    from knowledge.services import documents_audience_refresh

    affected = getattr(instance, _AFFECTED, [])
    if affected:
        documents_audience_refresh(document_ids=affected)


def connect() -> None:
    from tenants.models import TenantGroup

    pre_delete.connect(_before, sender=TenantGroup, dispatch_uid="knowledge-group-before")
    post_delete.connect(_after, sender=TenantGroup, dispatch_uid="knowledge-group-after")
