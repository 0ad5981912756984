from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chat.question_keys import normalize_question, reply_keys


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
        "tenants.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="API key",
        help_text="The key of an integration's conversation (REST); empty for the browser's.",
    )
    # The `user` field of a REST request: the integration's own name for its end user.
    external_user = models.CharField(
        max_length=256,
        blank=True,
        verbose_name="integration's user",
        help_text="The `user` an integration sent with the request.",
    )
    title = models.CharField(max_length=200, blank=True)
    # The model its user picked for it (issue #36), kept for its next turns; "" the tenant's
    # default.
    model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)
    archived = models.BooleanField(
        default=False, help_text="Archived by its owner: read-only until restored or deleted."
    )
    # Pinned by its owner to the top of their list (the latest pin first); None: not pinned.
    pinned_at = models.DateTimeField(null=True, blank=True, verbose_name="pinned")
    # The last message of the branch shown and sent to the model: regenerated replies and
    # edited messages are kept as versions (siblings under one parent), and the path from the
    # first message down to this one is the conversation as the user chose it.
    branch_tip = models.ForeignKey(
        "chat.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="version shown",
        help_text="The last message of the versions its owner chose to see.",
    )

    class Meta:
        verbose_name = "conversation"
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["user", "-updated_at"], name="session_user_recent")]

    def __str__(self) -> str:
        # Never the title: it is the conversation's first words, and this text shows up where
        # its reader is not meant to see content (usage records, deletion pages, the history).
        return f"Conversation {str(self.id)[:8]}"


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
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="children",
        verbose_name="follows",
        help_text="The message this one follows; messages that follow the same one are "
        "versions of one turn (a regenerated reply, an edited question).",
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
    finish_reason = models.CharField(
        max_length=16,
        blank=True,
        help_text="stop (the model ended it), length (max tokens), cancelled, disconnected, error.",
    )
    served_from_cache = models.BooleanField(default=False, verbose_name="from the cache")
    # The model that answered (a reply; issue #36): a tenant may use several.
    model = models.CharField(max_length=200, blank=True, default="")
    # A user's question in a tenant with company knowledge: "documents" when it was given
    # passages (knowledge.Passage), "none_found" when the documents had nothing on it.
    grounding = models.CharField(max_length=16, blank=True, default="")
    # A reply from company knowledge, checked against its passages (knowledge.support): its
    # verdict, the sentences quoted from each passage it rests on, the claims no passage
    # about the question holds, and the sentence the documents come closest with.
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["session", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.get_role_display()} message #{self.pk}"  # never the content (see above)


class CustomInstructions(models.Model):
    """What a person asks the assistant to keep in mind in all their conversations ("answer in
    Chinese", "I work in finance"): read after the tenant's system prompt, as message content
    (never control tokens). Theirs alone: the admin never shows them (docs/privacy.md)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="custom_instructions",
    )
    text = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "custom instructions"

    def __str__(self) -> str:
        return f"Custom instructions of user #{self.user_id}"  # never the text


class ContentRead(models.Model):
    """One reading of conversation text in the admin: who read whose conversation, when.

    Written by `chat.content_audit` whenever the admin shows a conversation's or a message's
    text, or searches it; only possible while the conversation's tenant has its content audit
    on. Copies of the names and ids are kept so the record outlives what it is about.
    """

    class Kind(models.TextChoices):
        CONVERSATION = "conversation", "Read a conversation"
        MESSAGE = "message", "Read a message"
        SEARCH = "search", "Searched the text of conversations"

    at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    reader = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reader_name = models.CharField(max_length=150, verbose_name="reader")
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, on_delete=models.SET_NULL, related_name="content_reads"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, verbose_name="what")
    session_id = models.UUIDField(null=True, verbose_name="conversation")
    message_id = models.BigIntegerField(null=True, verbose_name="message")
    owner_name = models.CharField(
        max_length=300, blank=True, verbose_name="whose", help_text="The conversation's owner."
    )
    query = models.CharField(max_length=200, blank=True, help_text="What a search looked for.")

    class Meta:
        verbose_name = "content read"
        ordering = ["-at"]
        indexes = [models.Index(fields=["tenant", "-at"], name="contentread_tenant_at")]

    def __str__(self) -> str:
        return f"{self.reader_name}: {self.get_kind_display()} ({self.at:%Y-%m-%d %H:%M})"


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
    # Made from an answer people rated well: the sources it rested on, with the sentences
    # quoted from them (knowledge.support), shown under it whenever it is served.
    sources = models.JSONField(default=list, blank=True, editable=False)
    enabled = models.BooleanField(
        default=True, help_text="Off: kept, never served (a reply to review, or on hold)."
    )
    hits = models.PositiveIntegerField(
        default=0, editable=False, help_text="Times it answered instead of the model."
    )
    last_hit_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: it does not expire.")
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
        self.normalized_key = normalize_question(self.question)
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def clean(self) -> None:
        """Each phrasing answers one reply only, in its scope (a tenant, or every tenant).
        (The CSV import checks the same rule against an index it builds once: keep the two
        in step through `no_keys_error` and `key_taken_error`.)"""
        keys = reply_keys(self)
        if not keys:
            raise no_keys_error()
        others = (
            CachedReply.objects.filter(tenant__isnull=True)
            if self.tenant_id is None
            else CachedReply.objects.filter(tenant_id=self.tenant_id)
        ).exclude(pk=self.pk)
        for other in others.only("id", "question", "alternatives", "tenant_id"):
            shared = set(keys) & set(reply_keys(other))
            if shared:
                raise key_taken_error(sorted(shared)[0], other)


def no_keys_error() -> ValidationError:
    return ValidationError(
        {"question": "This question is only punctuation or spaces: nothing would match."}
    )


def key_taken_error(key: str, other: CachedReply) -> ValidationError:
    return ValidationError(
        f"“{key}” already answers the cached reply “{other}” "
        "(after normalisation): edit that one instead, or reword this one.",
        code="unique",
    )


class CachedReplyImport(models.Model):
    """A CSV import of cached replies too large to run inside the admin's request: run by a
    Celery task (chat/cached_replies.py), its progress and outcome shown in the admin."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        CHECKING = "checking", "Checking rows"
        WRITING = "writing", "Writing"
        DONE = "done", "Done"
        FAILED = "failed", "Refused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    file_name = models.CharField(max_length=255, blank=True)
    text = models.TextField(blank=True, help_text="The file; emptied once the import ends.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    rows_total = models.PositiveIntegerField(default=0)
    rows_done = models.PositiveIntegerField(default=0)
    created = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    written = models.PositiveIntegerField(default=0, help_text="Replies written so far.")
    ignored_columns = models.JSONField(default=list, blank=True)
    errors = models.JSONField(default=list, blank=True)
    error_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.file_name or f"Import {str(self.id)[:8]}"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)


class CachedReplyCandidate(models.Model):
    """A first-turn question people keep asking: a cached reply waiting to be written.

    Counted per tenant by normalised key when the model (not the cache) answered a conversation's
    first message; staff promote it to a cached reply, possibly from a drafted answer.
    """

    class DraftStatus(models.TextChoices):
        NONE = "", "—"
        PENDING = "pending", "Queued"  # asked for, waiting for the worker
        RUNNING = "running", "Drafting…"
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
    draft_answer = models.TextField(
        blank=True,
        help_text="The model's draft (action “Draft an answer”): edit it, then promote.",
    )
    draft_status = models.CharField(
        max_length=16, choices=DraftStatus.choices, default=DraftStatus.NONE, blank=True
    )
    draft_error = models.TextField(blank=True)
    # The draft's way through the queue (chat/progress.py estimates from these).
    draft_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    draft_started_at = models.DateTimeField(null=True, blank=True, editable=False)
    draft_finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    promoted_to = models.ForeignKey(
        CachedReply,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="cached reply",
    )

    class Meta:
        verbose_name = "cached reply candidate"
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
        "tenants.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="API key",
        help_text="The key that submitted it over REST; empty when submitted in the admin.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0, help_text="Requests in the batch.")
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
    # The model its request named (issue #36), checked against the tenant's when submitted and
    # again when it runs; "" the tenant's default (a batch submitted in the admin).
    model = models.CharField(max_length=200, blank=True, default="")
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
