"""A read-only snapshot of a conversation, shared with the colleagues of its tenant by link."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class SharedConversation(models.Model):
    """The conversation as it was when shared (the branch shown then, frozen): it does not
    change when the conversation goes on. Visible to the active members of its tenant who have
    the link, until its owner revokes it, deletes the conversation or leaves the tenant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey("chat.ChatSession", on_delete=models.CASCADE, related_name="shares")
    shared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    title = models.CharField(max_length=200, blank=True)
    # [{"role", "content", "created_at", "sources": [{"number", "title", "where", "cited"}]}]
    messages = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Shared conversation {str(self.id)[:8]}"  # never the title (docs/privacy.md)
