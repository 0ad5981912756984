"""Where a tenant's documents live: a folder, an intranet site, a WebDAV server, synced into
its knowledge base on a schedule (docs/knowledge.md, "Sources").

A source's documents are ordinary documents of the knowledge base (knowledge.Document), added,
replaced and deleted through knowledge.services only; this app keeps what it needs to sync
incrementally: what each one was at the source when last read (`SourceItem`: ETag,
Last-Modified, mtime, size, sha256), and each run (`SourceRun`) with its counts and failures.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.utils import timezone


class Source(models.Model):
    class Kind(models.TextChoices):
        FOLDER = "folder", "Folder (a local path or a mounted share)"
        WEBSITE = "website", "Website (an intranet start page or sitemap)"
        WEBDAV = "webdav", "WebDAV (SharePoint, Nextcloud, …)"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="sources")
    name = models.CharField(max_length=200, help_text="What admins call it, e.g. “HR share”.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    location = models.CharField(
        max_length=2000,
        help_text="Folder: its path on this server (under QASSIST_SOURCE_FOLDERS). Website: the "
        "start page or a sitemap (…/sitemap.xml); pages are followed within its host and path. "
        "WebDAV: the folder's URL.",
    )
    username = models.CharField(max_length=200, blank=True, help_text="WebDAV or the site's.")
    # Sealed under SECRET_KEY (qassist.sealing); write-only in the admin.
    secret = models.TextField(blank=True, editable=False)
    # Who may read its documents (knowledge.access): no groups, everyone in the tenant.
    limited = models.BooleanField(
        default=False,
        verbose_name="only some groups may read it",
        help_text="On: its documents are read only by members of the groups below.",
    )
    groups = models.ManyToManyField("tenants.TenantGroup", blank=True, related_name="sources")
    enabled = models.BooleanField(default=True, help_text="Off: not synced on its schedule.")
    interval_minutes = models.PositiveIntegerField(
        default=60, help_text="Synced this often (and on demand: “Sync now”)."
    )
    max_documents = models.PositiveIntegerField(
        default=2000, help_text="Documents it may hold; beyond this the sync stops and says so."
    )
    max_total_mb = models.PositiveIntegerField(
        default=200, verbose_name="maximum size (MB)", help_text="All its documents together."
    )
    # Politeness (websites and WebDAV): requests one at a time, this long apart at least.
    delay_seconds = models.FloatField(
        default=0.5,
        help_text="Websites and WebDAV: the least time between two requests (a robots.txt "
        "Crawl-delay that asks for more is honoured).",
    )
    concurrency = models.PositiveSmallIntegerField(
        default=1, help_text="Websites and WebDAV: requests at once (1 to 4)."
    )
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="source_tenant_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def interval(self) -> timedelta:
        return timedelta(minutes=max(1, self.interval_minutes))


class SourceRun(models.Model):
    """One sync of a source, resumable: it works in slices of a Celery task, each claiming the
    run with a lease it renews; a slice that died (a worker killed) leaves the lease to lapse,
    and the beat task sends the run on. What a run has done is in its items (`seen_run`): a
    resumed run skips them."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    manual = models.BooleanField(default=False, help_text="Asked for in the admin.")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    slices = models.PositiveIntegerField(default=0)
    resumed = models.PositiveIntegerField(default=0, help_text="Taken over after a slice died.")
    seen = models.PositiveIntegerField(default=0)
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    bytes_read = models.PositiveBigIntegerField(default=0, help_text="Content read, in bytes.")
    # Why the whole run failed (the source unreachable, its credentials refused…): nothing was
    # removed and its documents keep answering.
    error = models.CharField(max_length=500, blank=True)
    notice = models.CharField(max_length=500, blank=True, help_text="E.g. a limit reached.")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["status", "lease_until"], name="sourcerun_live")]

    def __str__(self) -> str:
        return f"{self.source} {self.started_at:%Y-%m-%d %H:%M}"


class SourceItem(models.Model):
    """A file or page of a source, as it was when last read, and its document."""

    class Status(models.TextChoices):
        OK = "ok", "Synced"
        FAILED = "failed", "Failed"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="items")
    key = models.CharField(max_length=2000, help_text="Its path in the folder, or its URL.")
    key_hash = models.CharField(max_length=64, editable=False)  # sha256 of key, for the index
    origin = models.CharField(max_length=2000, blank=True)
    document = models.ForeignKey(
        "knowledge.Document", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    etag = models.CharField(max_length=300, blank=True)
    last_modified = models.CharField(max_length=100, blank=True)
    mtime = models.FloatField(null=True, blank=True)
    size = models.PositiveBigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    # Pages: the links it holds (a page that did not change is not read again, its links are).
    links = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OK)
    error = models.CharField(max_length=500, blank=True)
    seen_run = models.ForeignKey(
        SourceRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["source", "key"]
        constraints = [
            models.UniqueConstraint(fields=["source", "key_hash"], name="sourceitem_key")
        ]
        indexes = [models.Index(fields=["source", "seen_run"], name="sourceitem_seen")]

    def __str__(self) -> str:
        return self.key
