"""Thumbs up or down on a reply, with an optional reason: one per person per reply version
(and one per completion for an integration's). What tenant admins learn from it is in
feedback/services.py, under the privacy rules of docs/privacy.md."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Feedback(models.Model):
    class Rating(models.TextChoices):
        UP = "up", "Good reply"
        DOWN = "down", "Bad reply"

    class Reason(models.TextChoices):
        NONE = "", "—"
        WRONG = "wrong", "Wrong"
        OUTDATED = "outdated", "Outdated"
        NOT_HELPFUL = "not_helpful", "Not helpful"
        OTHER = "other", "Other"

    # The reply rated: one version of a turn (a regenerated reply is another message).
    message = models.ForeignKey(
        "chat.Message", on_delete=models.CASCADE, related_name="feedback", verbose_name="reply"
    )
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="feedback")
    # Who rated: a person in the chat, or an integration over REST (its key; `user` empty).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    api_key = models.ForeignKey(
        "tenants.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="API key",
    )
    rating = models.CharField(max_length=8, choices=Rating.choices)
    reason = models.CharField(max_length=16, choices=Reason.choices, blank=True, default="")
    # The person's own words: content (docs/privacy.md), shown in the admin only under the
    # tenant's content audit, each reading logged.
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "feedback"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "user"],
                condition=Q(user__isnull=False),
                name="feedback_one_per_person",
            ),
            models.UniqueConstraint(
                fields=["message"],
                condition=Q(user__isnull=True),
                name="feedback_one_per_completion",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "-updated_at"], name="feedback_tenant_recent")]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on reply #{self.message_id}"  # never the comment
