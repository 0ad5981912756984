"""Business rules of synced sources: what a source may be, its secret, syncing it on demand and
on schedule, and what its status says. The admin and the Celery tasks call these; the sync
itself is sources.sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from knowledge import services as knowledge
from knowledge.models import Document
from qassist import sealing
from sources.connectors import SourceError
from sources.models import Source, SourceItem, SourceRun
from tenants.models import TenantGroup

_PURPOSE = "qassist.sources.secret"
MAX_CONCURRENCY = 4


# --- checks ---------------------------------------------------------------------------------


def check_source(*, source: Source) -> None:
    """ValidationError (by field) for a source that cannot be synced as it is written."""
    errors: dict[str, str] = {}
    if source.kind == Source.Kind.FOLDER:
        from sources.connectors.folder import check_folder

        try:
            check_folder(source.location)
        except SourceError as exc:
            errors["location"] = str(exc)
    else:
        from urllib.parse import urlsplit

        parts = urlsplit(source.location)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            errors["location"] = "An http:// or https:// address, e.g. https://intranet/handbook/."
    if not 1 <= source.concurrency <= MAX_CONCURRENCY:
        errors["concurrency"] = f"From 1 to {MAX_CONCURRENCY} requests at once."
    if source.delay_seconds < 0 or source.delay_seconds > 60:
        errors["delay_seconds"] = "From 0 to 60 seconds."
    if source.max_documents < 1:
        errors["max_documents"] = "At least one document."
    if source.interval_minutes < 5:
        errors["interval_minutes"] = "At least every 5 minutes."
    if errors:
        raise ValidationError(errors)


def check_groups(*, source: Source, groups: Sequence[TenantGroup]) -> None:
    for group in groups:
        if group.tenant_id != source.tenant_id:
            raise ValidationError({"groups": f"“{group}” is not a group of {source.tenant}."})


# --- the secret -----------------------------------------------------------------------------


def source_set_password(*, source: Source, password: str | None) -> None:
    """Keep the password sealed under SECRET_KEY (None or "": forget it). Never shown again."""
    source.secret = sealing.seal(password or None, purpose=_PURPOSE)
    if source.pk:
        Source.objects.filter(pk=source.pk).update(secret=source.secret)


def source_password(*, source: Source) -> str | None:
    """The password, or None (none set, or SECRET_KEY changed since: set it again)."""
    return sealing.unseal(source.secret, purpose=_PURPOSE)


# --- saving ---------------------------------------------------------------------------------


@transaction.atomic
def source_save(
    *, source: Source, groups: Sequence[TenantGroup] | None = None, password: str | None = None
) -> Source:
    """Save a checked source (a new one is synced at once); `groups` replace its groups, and
    its documents follow them now; `password` (when given) replaces the kept one."""
    check_source(source=source)
    created = source.pk is None
    if created and source.next_run_at is None:
        source.next_run_at = timezone.now()
    source.save()
    if password is not None:
        source_set_password(source=source, password=password)
    if groups is not None:
        source_set_groups(source=source, groups=groups)
    if created:
        source_sync_now(source=source, manual=False)
    return source


@transaction.atomic
def source_set_groups(*, source: Source, groups: Sequence[TenantGroup]) -> None:
    """The source's groups; its documents follow at once (`limited` says whether they count)."""
    from sources.sync import follow_groups

    check_groups(source=source, groups=groups)
    source.groups.set(groups)
    follow_groups(source)


def source_delete(*, source: Source) -> int:
    """Delete a source with the documents it synced (each through knowledge's delete)."""
    ids = list(
        SourceItem.objects.filter(source=source, document__isnull=False).values_list(
            "document_id", flat=True
        )
    )
    count = 0
    for document in Document.objects.filter(pk__in=ids):
        knowledge.document_delete(document=document)
        count += 1
    source.delete()
    return count


# --- syncing --------------------------------------------------------------------------------


def source_sync_now(*, source: Source, manual: bool = True) -> SourceRun:
    """Start a sync of the source now, or the one going on."""
    from sources.tasks import sync_dispatch

    with transaction.atomic():
        Source.objects.select_for_update().filter(pk=source.pk).first()  # one run at a time
        running = source.runs.filter(status=SourceRun.Status.RUNNING).first()
        if running is not None:
            return running
        run = SourceRun.objects.create(source=source, manual=manual)
        Source.objects.filter(pk=source.pk).update(next_run_at=timezone.now() + source.interval)
        sync_dispatch(run_id=run.pk)
    return run


def runs_stale(*, now: datetime | None = None) -> list[int]:
    """Runs going on whose slice is neither holding them nor queued lately: a worker died
    with it, or its message was lost."""
    now = now or timezone.now()
    quiet = now - timedelta(seconds=float(settings.QASSIST_SOURCE_LEASE_SECONDS))
    return list(
        SourceRun.objects.filter(status=SourceRun.Status.RUNNING)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=quiet))
        .filter(started_at__lt=quiet)
        .values_list("id", flat=True)
    )


def sources_tick(*, now: datetime | None = None) -> dict[str, int]:
    """Beat's task: runs whose slice died are sent on; sources due start a run."""
    from sources.tasks import sync_dispatch

    now = now or timezone.now()
    resumed = 0
    for run_id in runs_stale(now=now):
        with transaction.atomic():
            SourceRun.objects.filter(pk=run_id).update(resumed=F("resumed") + 1)
            sync_dispatch(run_id=run_id)
        resumed += 1
    started = 0
    due = Source.objects.filter(enabled=True, next_run_at__lte=now, tenant__active=True).exclude(
        runs__status=SourceRun.Status.RUNNING
    )
    for source in due:
        source_sync_now(source=source, manual=False)
        started += 1
    return {"resumed": resumed, "started": started}


# --- status ---------------------------------------------------------------------------------


@dataclass
class SourceStatus:
    """What the admin shows of a source."""

    last: SourceRun | None
    running: SourceRun | None
    next_run_at: datetime | None
    documents: dict[str, int]  # by knowledge status
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path or URL, reason)
    failure_count: int = 0

    @property
    def documents_text(self) -> str:
        total = sum(self.documents.values())
        if not total:
            return "No documents yet"
        parts = [
            f"{self.documents[status]} {label.lower()}"
            for status, label in Document.Status.choices
            if self.documents.get(status)
        ]
        return f"{total} document(s): {', '.join(parts)}"

    @property
    def ready(self) -> bool:
        """Synced, and every document it holds indexed (or failed with its reason)."""
        waiting = self.documents.get(Document.Status.QUEUED, 0) + self.documents.get(
            Document.Status.INDEXING, 0
        )
        return self.running is None and self.last is not None and not waiting


FAILURES_SHOWN = 50


def source_status(*, source: Source) -> SourceStatus:
    runs = list(source.runs.order_by("-started_at")[:2])
    running = next((r for r in runs if r.status == SourceRun.Status.RUNNING), None)
    last = next((r for r in runs if r.status != SourceRun.Status.RUNNING), None)
    ids = SourceItem.objects.filter(source=source, document__isnull=False).values("document_id")
    by_status = {
        row["status"]: row["n"]
        for row in Document.objects.filter(pk__in=ids)
        .values("status")
        .annotate(n=Count("id"))
        .order_by()
    }
    failed = SourceItem.objects.filter(source=source, status=SourceItem.Status.FAILED)
    return SourceStatus(
        last=last,
        running=running,
        next_run_at=source.next_run_at if source.enabled else None,
        documents=by_status,
        failures=list(failed.order_by("key").values_list("key", "error")[:FAILURES_SHOWN]),
        failure_count=failed.count(),
    )
