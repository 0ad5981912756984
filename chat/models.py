from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone


class ChatSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="chat_sessions"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="chat_sessions",
    )
    api_key = models.ForeignKey(
        "tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The `user` field of a REST request: the integration's own name for its end user.
    external_user = models.CharField(max_length=256, blank=True)
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)
    archived = models.BooleanField(default=False)
    # The last message of the branch shown and sent to the model: regenerated replies and
    # edited messages are kept as versions (siblings under one parent), and the path from the
    # first message down to this one is the conversation as the user chose it.
    branch_tip = models.ForeignKey(
        "chat.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["user", "-updated_at"], name="session_user_recent")]

    def __str__(self) -> str:
        return self.title or f"Session {str(self.id)[:8]}"


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system", "System"
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    class Status(models.TextChoices):
        STREAMING = "streaming", "Streaming"
        COMPLETE = "complete", "Complete"
        INTERRUPTED = "interrupted", "Interrupted"
        ERROR = "error", "Error"

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    # The message this one follows; messages with the same parent are versions of one turn.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    error = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="time to first token (ms)"
    )
    finish_reason = models.CharField(max_length=16, blank=True)
    served_from_cache = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["session", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class CachedReply(models.Model):
    """An answer curated by staff, served for a matching single-turn question without the model."""

    tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="cached_replies",
        help_text="Empty: every tenant.",
    )
    question = models.TextField(
        help_text=(
            "Answered from the cache only when a conversation's first message is this question "
            "(or one of the alternative phrasings below) exactly, once case, full-width and "
            "half-width forms, punctuation (，。？！ as much as , . ? !) and spaces are set "
            "aside. Nothing fuzzy: “How do I reach the VPN, please?” is another question "
            "unless you list it. A follow-up question in a conversation is never answered "
            "from the cache: its meaning depends on what came before."
        )
    )
    normalized_key = models.CharField(max_length=512, db_index=True, editable=False)
    alternatives = models.TextField(
        blank=True,
        verbose_name="alternative phrasings",
        help_text="Other ways people ask the same thing, one per line; matched the same way.",
    )
    answer = models.TextField()
    enabled = models.BooleanField(default=True)
    hits = models.PositiveIntegerField(default=0, editable=False)
    last_hit_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "cached replies"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "normalized_key"], name="cachedreply_tenant_key"
            ),
            models.UniqueConstraint(
                fields=["normalized_key"],
                condition=Q(tenant__isnull=True),
                name="cachedreply_global_key",
            ),
        ]

    def __str__(self) -> str:
        return self.question[:80]

    def save(self, *args: object, **kwargs: object) -> None:
        from chat.cache import normalize_question

        self.normalized_key = normalize_question(self.question)
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def clean(self) -> None:
        """Each phrasing answers one reply only, in its scope (a tenant, or every tenant)."""
        from chat.cache import reply_keys

        keys = reply_keys(self)
        if not keys:
            raise ValidationError(
                {"question": "This question is only punctuation or spaces: nothing would match."}
            )
        others = (
            CachedReply.objects.filter(tenant__isnull=True)
            if self.tenant_id is None
            else CachedReply.objects.filter(tenant_id=self.tenant_id)
        ).exclude(pk=self.pk)
        for other in others.only("id", "question", "alternatives", "tenant_id"):
            shared = set(keys) & set(reply_keys(other))
            if shared:
                raise ValidationError(
                    f"“{sorted(shared)[0]}” already answers the cached reply “{other}” "
                    "(after normalisation): edit that one instead, or reword this one.",
                    code="unique",
                )


class CachedReplyCandidate(models.Model):
    """A first-turn question people keep asking: a cached reply waiting to be written.

    Counted per tenant by normalised key when the model (not the cache) answered a conversation's
    first message; staff promote it to a cached reply, possibly from a drafted answer.
    """

    class DraftStatus(models.TextChoices):
        NONE = "", "—"
        PENDING = "pending", "Drafting…"
        READY = "ready", "Draft ready"
        FAILED = "failed", "Draft failed"

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="cached_reply_candidates"
    )
    normalized_key = models.CharField(max_length=512, editable=False)
    question = models.TextField(help_text="The latest wording people used.")
    count = models.PositiveIntegerField(default=0, help_text="Times asked as a first message.")
    last_answer = models.TextField(blank=True, help_text="The model's latest answer.")
    first_asked_at = models.DateTimeField(default=timezone.now)
    last_asked_at = models.DateTimeField(default=timezone.now, db_index=True)
    draft_answer = models.TextField(blank=True)
    draft_status = models.CharField(
        max_length=16, choices=DraftStatus.choices, default=DraftStatus.NONE, blank=True
    )
    draft_error = models.TextField(blank=True)
    promoted_to = models.ForeignKey(
        CachedReply, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-count", "-last_asked_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "normalized_key"], name="candidate_tenant_key"
            )
        ]

    def __str__(self) -> str:
        return self.question[:80]


class Batch(models.Model):
    """Many chat completions submitted at once and collected later; run at background priority
    (only on spare sequences) by a Celery worker, item by item. See chat/batches.py."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        CANCELLED = "cancelled", "Cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="batches")
    api_key = models.ForeignKey(
        "tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The process running it: a runner whose heartbeat stops is presumed dead, and the batch is
    # taken over (its unfinished items run again; finished ones never).
    runner = models.CharField(max_length=64, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "batches"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="batch_status_heartbeat")]

    def __str__(self) -> str:
        return self.name or f"Batch {str(self.id)[:8]}"


class BatchItem(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items")
    index = models.PositiveIntegerField()
    custom_id = models.CharField(max_length=256, blank=True)
    messages = models.JSONField()  # [{"role", "content"}], as the client sent them
    params = models.JSONField()  # SamplingParams.to_dict()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True)  # a retry waits until then
    content = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=16, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["batch", "index"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "index"], name="batchitem_batch_index")
        ]
        indexes = [models.Index(fields=["batch", "status"], name="batchitem_batch_status")]

    def __str__(self) -> str:
        return f"{self.batch_id} #{self.index} ({self.status})"
