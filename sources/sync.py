"""A source's sync, run in slices of a Celery task (sources.tasks.sync_source).

A slice claims its run with a lease (renewed as it works, `QASSIST_SOURCE_LEASE_SECONDS`),
walks the source (sources.connectors), and for each file or page decides what to do
(sources.decisions): unchanged ones are marked seen in batches without reading them; new and
changed ones are read, compared by sha256, and added or replaced through knowledge.services (the
knowledge base's own rules: checks, storage limit, indexing queued per document). After
`QASSIST_SOURCE_SLICE_SECONDS` it gives the run back and queues the next slice, so that a long
sync never holds the Celery worker from other work.

Checkpoints are the items themselves: each one done is marked seen by the run in the same
transaction as its document and the run's counts. A slice that dies (the worker SIGKILLed)
leaves its lease to lapse; the beat task sends the run on, and the next slice walks again,
skipping what is marked (a website's pages are not fetched again: the links they held are
kept). Meanwhile the documents as they were keep answering: a replaced one answers from its
previous version until the new one is indexed, and nothing is removed before the run's end.

At the end of a complete walk, what it did not see leaves the knowledge base through
knowledge.services.document_delete: the document, its passages, vectors and index entries;
the engine drops the passages' kept KV when the tenant's index version moves (inference/).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from knowledge import services as knowledge
from knowledge.access import audience_key
from knowledge.models import Document
from sources import decisions
from sources.connectors import Connector, Found, ItemError, Known, SourceError, human
from sources.decisions import Action, Kept, Outcome
from sources.models import Source, SourceItem, SourceRun
from tenants.models import TenantGroup

logger = logging.getLogger(__name__)

FLUSH_ITEMS = 500  # unchanged items marked seen in one statement
FLUSH_SECONDS = 2.0
RENEW_SECONDS = 5.0


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def lease() -> timedelta:
    return timedelta(seconds=float(settings.QASSIST_SOURCE_LEASE_SECONDS))


def file_limit() -> int:
    return int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024


def claim(run_id: int) -> bool:
    """Take the run for this slice: nobody else holds it (a lease that lapsed is free)."""
    now = timezone.now()
    return bool(
        SourceRun.objects.filter(pk=run_id, status=SourceRun.Status.RUNNING)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_until=now + lease(), slices=F("slices") + 1)
    )


@dataclass
class Counts:
    seen: int = 0
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    bytes_read: int = 0

    def as_update(self) -> dict[str, F]:
        return {name: F(name) + value for name, value in vars(self).items() if value}


@dataclass
class Slice:
    """One slice of a run: the run claimed, its source, the items as the last sync kept them."""

    run: SourceRun
    source: Source
    items: dict[str, SourceItem]
    deadline: float
    audience: str
    pending: list[int] = field(default_factory=list)  # unchanged items to mark seen
    pending_counts: Counts = field(default_factory=Counts)
    flushed_at: float = field(default_factory=time.monotonic)
    renewed_at: float = field(default_factory=time.monotonic)
    documents: int = 0  # this run's documents so far (the limit)
    total: int = 0  # and their bytes
    limit_reached: str = ""

    def known(self, key: str) -> Known | None:
        item = self.items.get(key)
        if item is None:
            return None
        return Known(
            etag=item.etag,
            last_modified=item.last_modified,
            links=list(item.links or []),
            done=item.seen_run_id == self.run.pk,
        )


def run_slice(*, run_id: int, seconds: float | None = None) -> str:
    """Work on a run for one slice. Returns "done", "failed", "continued" (the next slice is
    queued), or "busy" (another slice holds it, or it is over)."""
    if not claim(run_id):
        return "busy"
    run = SourceRun.objects.select_related("source__tenant").get(pk=run_id)
    source = run.source
    budget = float(settings.QASSIST_SOURCE_SLICE_SECONDS) if seconds is None else seconds
    work = Slice(
        run=run,
        source=source,
        items={item.key: item for item in source.items.all()},
        deadline=time.monotonic() + budget,
        audience=source_audience(source),
    )
    for item in work.items.values():
        if item.seen_run_id == run.pk and item.document_id is not None:
            work.documents += 1
            work.total += item.size or 0
    try:
        with connect(source, work) as connector:
            for found in connector.walk():
                _handle(work, connector, found)
                if work.limit_reached:
                    break
                if time.monotonic() > work.deadline:
                    _flush(work)
                    _give_back(run)
                    return "continued"
                _keep_alive(work)
            _flush(work)
            complete = connector.complete and not work.limit_reached
            notice = work.limit_reached
            if not connector.complete:
                notice = "Part of the source could not be listed: nothing was removed this time."
    except SourceError as exc:
        _flush(work)
        _end(run, status=SourceRun.Status.FAILED, error=str(exc))
        logger.warning("sync of source %s (%s) failed: %s", source.pk, source.name, exc)
        return "failed"
    except Exception:
        logger.exception("sync of source %s (%s) failed", source.pk, source.name)
        _flush(work)
        _end(run, status=SourceRun.Status.FAILED, error="The sync failed unexpectedly; the "
             "error was logged.")  # fmt: skip
        return "failed"
    removed = _prune(work, complete=complete)
    follow_groups(source)
    _end(run, status=SourceRun.Status.DONE, notice=notice, removed=removed)
    return "done"


def connect(source: Source, work: Slice) -> Connector:
    """The connector of the source's kind."""
    from sources.services import source_password

    kind = Source.Kind
    if source.kind == kind.FOLDER:
        from sources.connectors.folder import FolderConnector

        return FolderConnector(location=source.location, known=work.known, file_limit=file_limit())
    password = source_password(source=source)
    auth = (source.username, password or "") if source.username else None
    if source.kind == kind.WEBSITE:
        from sources.connectors.website import WebsiteConnector

        return WebsiteConnector(
            location=source.location,
            known=work.known,
            file_limit=file_limit(),
            delay=source.delay_seconds,
            concurrency=source.concurrency,
            auth=auth,
            max_pages=source.max_documents * 2,
        )
    from sources.connectors.webdav import WebdavConnector

    return WebdavConnector(
        location=source.location,
        known=work.known,
        file_limit=file_limit(),
        auth=auth,
        delay=source.delay_seconds,
    )


def source_audience(source: Source) -> str:
    return audience_key(source.groups.values_list("id", flat=True), limited=source.limited)


def _kept(item: SourceItem | None) -> Kept | None:
    if item is None:
        return None
    return Kept(
        has_document=item.document_id is not None,
        failed=item.status == SourceItem.Status.FAILED,
        seen_run=item.seen_run_id,
        etag=item.etag,
        last_modified=item.last_modified,
        mtime=item.mtime,
        size=item.size,
        sha256=item.sha256,
    )


def _handle(work: Slice, connector: Connector, found: Found) -> None:
    item = work.items.get(found.key)
    action = decisions.decide(_kept(item), found, run_id=work.run.pk)
    if action is Action.DONE:
        return
    if action is Action.FAIL:
        _fail(work, found, found.error)
        return
    if action is Action.UNCHANGED:
        assert item is not None
        if item.document_id is not None:
            if _over_limits(work, found, item.size or 0):
                return
            work.documents += 1
            work.total += item.size or 0
        work.pending.append(item.pk)
        work.pending_counts.seen += 1
        work.pending_counts.unchanged += 1
        item.seen_run_id = work.run.pk
        if len(work.pending) >= FLUSH_ITEMS:
            _flush(work)
        return
    if found.size is not None and found.size > connector.file_limit:
        _fail(work, found, _too_large(found.size, connector.file_limit))
        return
    if _over_limits(work, found, found.size or 0):
        return
    try:
        data = connector.read(found)
    except ItemError as exc:
        _fail(work, found, str(exc))
        return
    if _over_limits(work, found, len(data)):
        return
    _store(work, found, item, data)


def _too_large(size: int, limit: int) -> str:
    from sources.connectors import too_large

    return too_large(size, limit)


def _over_limits(work: Slice, found: Found, size: int) -> bool:
    """Whether the source's limits leave no room for this file (then the walk stops at the
    number of documents, or this file fails for the bytes)."""
    source = work.source
    if work.documents >= source.max_documents:
        work.limit_reached = (
            f"The limit of {source.max_documents:,} documents was reached: the rest of the "
            "source was not synced, and nothing was removed. Raise the limit to sync it all."
        )
        return True
    limit = source.max_total_mb * 1024 * 1024
    if work.total + size > limit:
        _fail(
            work,
            found,
            f"With it the source's documents would take more than its limit of {human(limit)} "
            "(maximum size); it was not added.",
        )
        return True
    return False


def _store(work: Slice, found: Found, item: SourceItem | None, data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    outcome = decisions.after_read(_kept(item), digest)
    run = work.run
    counts = Counts(seen=1, bytes_read=len(data))
    try:
        with transaction.atomic():
            document = item.document if item is not None and item.document_id else None
            if outcome is Outcome.ADD:
                document = knowledge.document_upload(
                    tenant=work.source.tenant,
                    upload=knowledge.Upload(found.name, data),
                    groups=_groups(work.source),
                    origin=found.origin,
                )
                counts.added = 1
            elif outcome is Outcome.REPLACE:
                assert document is not None
                document = knowledge.document_replace(
                    document=document,
                    upload=knowledge.Upload(found.name, data),
                    origin=found.origin,
                )
                counts.changed = 1
            else:
                counts.unchanged = 1
            item = _save_item(work, found, item, document, digest, size=len(data))
            SourceRun.objects.filter(pk=run.pk).update(**counts.as_update())
    except knowledge.KnowledgeError as exc:
        if exc.code != "duplicate_document":
            _fail(work, found, exc.message)
            return
        # The same bytes as a document already there (a page under two addresses): nothing
        # to add, and nothing to read again while the source says it is unchanged.
        with transaction.atomic():
            item = _save_item(work, found, item, None, digest, size=len(data))
            SourceRun.objects.filter(pk=run.pk).update(
                **Counts(seen=1, unchanged=1, bytes_read=len(data)).as_update()
            )
        work.items[found.key] = item
        return
    work.items[found.key] = item
    if item.document_id is not None:
        work.documents += 1
        work.total += len(data)


def _groups(source: Source) -> list[TenantGroup] | None:
    return list(source.groups.all()) if source.limited else None


def _save_item(
    work: Slice,
    found: Found,
    item: SourceItem | None,
    document: Document | None,
    digest: str,
    *,
    size: int,
) -> SourceItem:
    if item is None:
        item = SourceItem(source=work.source, key=found.key, key_hash=key_hash(found.key))
    item.origin = found.origin[:2000]
    item.document = document
    item.etag = found.etag[:300]
    item.last_modified = found.last_modified[:100]
    item.mtime = found.mtime
    item.size = size
    item.sha256 = digest
    item.links = found.links
    item.status = SourceItem.Status.OK
    item.error = ""
    item.seen_run = work.run
    item.updated_at = timezone.now()
    item.save()
    return item


def _fail(work: Slice, found: Found, reason: str) -> None:
    """The item keeps its last good document (if any); the reason is shown on the source."""
    item = work.items.get(found.key)
    with transaction.atomic():
        if item is None:
            item = SourceItem(
                source=work.source,
                key=found.key[:2000],
                key_hash=key_hash(found.key),
                origin=found.origin[:2000],
            )
        item.status = SourceItem.Status.FAILED
        item.error = reason[:500]
        item.seen_run = work.run
        if found.links:
            item.links = found.links
        item.updated_at = timezone.now()
        item.save()
        SourceRun.objects.filter(pk=work.run.pk).update(seen=F("seen") + 1, failed=F("failed") + 1)
    work.items[found.key] = item
    if item.document_id is not None:
        work.documents += 1
        work.total += item.size or 0


def _flush(work: Slice) -> None:
    """Mark the unchanged items seen, with the run's counts, in one transaction."""
    if work.pending:
        with transaction.atomic():
            for start in range(0, len(work.pending), FLUSH_ITEMS):
                SourceItem.objects.filter(pk__in=work.pending[start : start + FLUSH_ITEMS]).update(
                    seen_run=work.run
                )
            SourceRun.objects.filter(pk=work.run.pk).update(**work.pending_counts.as_update())
        work.pending = []
        work.pending_counts = Counts()
    work.flushed_at = time.monotonic()


def _keep_alive(work: Slice) -> None:
    now = time.monotonic()
    if work.pending and now - work.flushed_at > FLUSH_SECONDS:
        _flush(work)
    if now - work.renewed_at > RENEW_SECONDS:
        SourceRun.objects.filter(pk=work.run.pk).update(lease_until=timezone.now() + lease())
        work.renewed_at = now


def _give_back(run: SourceRun) -> None:
    """End this slice: the lease is let go and the next slice queued."""
    from sources.tasks import sync_dispatch

    SourceRun.objects.filter(pk=run.pk).update(lease_until=None)
    sync_dispatch(run_id=run.pk)


def _prune(work: Slice, *, complete: bool) -> int:
    """Items the complete walk did not see leave, with their documents."""
    rows = SourceItem.objects.filter(source=work.source).values_list("id", "seen_run_id")
    gone = decisions.to_prune(rows, run_id=work.run.pk, complete=complete)
    removed = 0
    for item in SourceItem.objects.filter(pk__in=gone).select_related("document"):
        with transaction.atomic():
            if item.document is not None:
                knowledge.document_delete(document=item.document)
            item.delete()
        removed += 1
    return removed


def follow_groups(source: Source) -> None:
    """The source's documents are read by whom the source says, now (its groups may have
    changed since they were added)."""
    audience = source_audience(source)
    ids = SourceItem.objects.filter(source=source, document__isnull=False).values_list(
        "document_id", flat=True
    )
    groups = list(source.groups.all()) if source.limited else None
    for document in Document.objects.filter(pk__in=ids).exclude(audience=audience):
        knowledge.document_set_groups(document=document, groups=groups)


def _end(
    run: SourceRun, *, status: str, error: str = "", notice: str = "", removed: int = 0
) -> None:
    now = timezone.now()
    SourceRun.objects.filter(pk=run.pk).update(
        status=status,
        error=error[:500],
        notice=notice[:500],
        removed=F("removed") + removed,
        finished_at=now,
        lease_until=None,
    )
    Source.objects.filter(pk=run.source_id).update(next_run_at=now + run.source.interval)
