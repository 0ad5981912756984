"""A tenant's documents, their chunks, and the passages a reply was given.

A document is a tenant's (its knowledge base) or, when `session` is set, attached to one
conversation: only that conversation retrieves from it, only its owner sees it, and it goes
with the conversation. The uploaded bytes are kept in the database (`DocumentFile`), so every
web process and Celery worker of a deployment reads the same file without shared storage.

Chunks are the passages retrieval finds. A document's chunks are written in one transaction
when indexing finishes, replacing the previous version's: a question never sees half a
document, and a replaced document answers from its previous version until the new one is
ready. The full-text
and vector indexes live beside the table (see `knowledge.index`): an FTS5 table on SQLite, a
tsvector and a pgvector column on PostgreSQL.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class KnowledgeBase(models.Model):
    """A tenant's settings for company knowledge."""

    class Mode(models.TextChoices):
        FIRST = "documents_first", "Documents first"
        ONLY = "documents_only", "Documents only"
        OFF = "off", "Off"

    tenant = models.OneToOneField(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="knowledge_base"
    )
    mode = models.CharField(
        max_length=16,
        choices=Mode.choices,
        default=Mode.FIRST,
        help_text=(
            "Documents first: answers come from the documents, and when they say nothing on a "
            "question the assistant answers on its own, marked as not from the documents. "
            "Documents only: such questions are declined. Off: documents are not searched."
        ),
    )
    storage_limit_mb = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="storage limit (MB)",
        help_text="Uploaded files this tenant may keep, in MB. Empty: the server's default.",
    )
    # Raised whenever the set of searchable chunks changes: processes holding vectors in
    # memory reload this tenant's when it moved.
    index_version = models.PositiveBigIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "knowledge settings"
        verbose_name_plural = "knowledge settings"

    def __str__(self) -> str:
        return f"Knowledge of {self.tenant}"

    @property
    def storage_limit_bytes(self) -> int:
        mb = self.storage_limit_mb
        if mb is None:
            mb = int(settings.QASSIST_KNOWLEDGE_STORAGE_MB)
        return mb * 1024 * 1024


class Document(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        INDEXING = "indexing", "Indexing"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="documents")
    # Attached to one conversation (visible to its owner, retrieved only there), or None: the
    # tenant's knowledge base.
    session = models.ForeignKey(
        "chat.ChatSession",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="documents",
    )
    title = models.CharField(max_length=300)
    filename = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, help_text="The format it was read as.")
    size = models.PositiveBigIntegerField(help_text="Bytes.")
    sha256 = models.CharField(max_length=64, db_index=True)
    version = models.PositiveIntegerField(default=1, help_text="Raised by each replacement.")
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    error = models.CharField(max_length=300, blank=True, help_text="Why indexing failed.")
    progress = models.PositiveSmallIntegerField(default=0, help_text="Percent indexed.")
    # The indexing task could not be queued (the broker was away): beat queues it again.
    needs_dispatch = models.BooleanField(default=False, editable=False)
    pages = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0, verbose_name="passages")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        "tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who may read it (docs/knowledge.md, "Who may read what"): no groups, everyone in the
    # tenant; else the members of these groups. `audience` is the same as one string, copied
    # to its passages so that retrieval filters one table (knowledge.access).
    groups = models.ManyToManyField(
        "tenants.TenantGroup",
        blank=True,
        related_name="documents",
        help_text="Empty: everyone in the tenant may read it. Else only members of these groups.",
    )
    audience = models.CharField(max_length=500, blank=True, default="", editable=False)
    # Where a synced document lives (the sources app): a page's URL, a file's path in the share.
    origin = models.CharField(max_length=2000, blank=True, default="", editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["tenant", "session", "status"], name="document_scope"),
        ]

    def __str__(self) -> str:
        return self.title or self.filename

    @property
    def public_id(self) -> str:
        return f"doc-{self.id.hex}"


class DocumentFile(models.Model):
    """The uploaded bytes of a document's current version."""

    document = models.OneToOneField(
        Document, primary_key=True, on_delete=models.CASCADE, related_name="file"
    )
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"file of {self.document_id}"


class Chunk(models.Model):
    """A passage of a document: what retrieval finds and the model reads."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    # Copied from the document so retrieval filters one table.
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(
        "chat.ChatSession", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    version = models.PositiveIntegerField()
    ordinal = models.PositiveIntegerField()
    headings = models.CharField(max_length=500, blank=True)  # " › "-joined section path
    page = models.PositiveIntegerField(null=True, blank=True)
    page_end = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    # Written mostly in Chinese (or another CJK script): retrieval ranks passages of each
    # script apart too, so a question in one language finds the answer written in the other.
    cjk = models.BooleanField(default=False)
    tokens = models.PositiveIntegerField()
    search_text = models.TextField()  # words for full-text search, Chinese segmented
    embedding = models.BinaryField()  # float32, L2-normalised
    embedder = models.CharField(max_length=64)
    # The document's audience (who may read it), copied: every search filters on it.
    audience = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["document", "ordinal"]
        indexes = [
            models.Index(fields=["tenant", "session"], name="chunk_scope"),
            models.Index(fields=["document", "version"], name="chunk_document_version"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id} #{self.ordinal}"

    @property
    def where(self) -> str:
        """Section and pages, for a citation ("Hotels, page 2")."""
        parts = []
        if self.headings:
            parts.append(self.headings.split(" › ")[-1])
        if self.page is not None:
            if self.page_end is not None and self.page_end != self.page:
                parts.append(f"pages {self.page}–{self.page_end}")
            else:
                parts.append(f"page {self.page}")
        return ", ".join(parts)


class Passage(models.Model):
    """A passage a question was given, numbered as replies cite it ([1], [2], ...).

    Passages belong to the user's message: every reply to it (a regenerated version too) read
    the same ones. `introduced`: its text was placed in this message; otherwise an earlier
    message of the conversation holds it, under the same number. The text itself stays the
    document's (it is not copied here): once a document is deleted or replaced, the passage
    still names what it was (title, section, page), and the conversation shows it as removed.
    """

    message = models.ForeignKey("chat.Message", on_delete=models.CASCADE, related_name="passages")
    number = models.PositiveSmallIntegerField()
    introduced = models.BooleanField(default=True)
    chunk = models.ForeignKey(Chunk, null=True, blank=True, on_delete=models.SET_NULL)
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL)
    title = models.CharField(max_length=300)
    where = models.CharField(max_length=300, blank=True)
    score = models.FloatField(default=0.0)
    # The document's audience when the passage was given: who may see it once the document is
    # gone (while it exists, its own audience, which may have changed since, decides).
    audience = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["message", "number"]
        constraints = [
            models.UniqueConstraint(fields=["message", "number"], name="passage_message_number")
        ]

    def __str__(self) -> str:
        return f"[{self.number}] {self.title}"
