"""Where background work stands, for the admin: how many jobs are ahead of a queued draft or
batch, about how long until it is done, and how far a running one has come.

Estimates come from the durations of the latest finished work of the same kind (drafts; batch
items), so none is shown before there is any. They are for people to wait by, never for code
to decide on. Queue order (docs/batches.md, "Queues"): drafts first, then batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import mean

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from chat.cached_replies import DRAFT_STALE_SECONDS
from chat.models import Batch, BatchItem, CachedReplyCandidate

RECENT = 20  # finished jobs an estimate averages over

_BUSY_DRAFTS = (CachedReplyCandidate.DraftStatus.PENDING, CachedReplyCandidate.DraftStatus.RUNNING)


@dataclass(frozen=True)
class Outlook:
    ahead: int  # jobs that start before this one (0 once it runs)
    seconds_left: float | None  # until it is done; None: no estimate yet


def _mean_seconds(pairs: list[tuple[datetime | None, datetime | None]]) -> float | None:
    durations = [
        (end - start).total_seconds()
        for start, end in pairs
        if start is not None and end is not None
    ]
    return mean(durations) if durations else None


def draft_seconds() -> float | None:
    """How long a draft took to write, lately (from its start to its end)."""
    rows = (
        CachedReplyCandidate.objects.filter(
            draft_started_at__isnull=False, draft_finished_at__isnull=False
        )
        .order_by("-draft_finished_at")
        .values_list("draft_started_at", "draft_finished_at")[:RECENT]
    )
    return _mean_seconds(list(rows))


def batch_item_seconds() -> float | None:
    """How long a batch item took to run, lately."""
    rows = (
        BatchItem.objects.filter(
            status=BatchItem.Status.DONE, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:RECENT]
    )
    return _mean_seconds(list(rows))


def _live_drafts() -> Q:
    since = timezone.now() - timedelta(seconds=DRAFT_STALE_SECONDS)
    return Q(draft_status__in=_BUSY_DRAFTS, draft_requested_at__gte=since)


def draft_outlook(candidate: CachedReplyCandidate, *, typical: float | None = None) -> Outlook:
    """A queued draft: the drafts asked for before it and not done; a running one: none."""
    typical = draft_seconds() if typical is None else typical
    if candidate.draft_status == CachedReplyCandidate.DraftStatus.RUNNING:
        started = candidate.draft_started_at or timezone.now()
        elapsed = (timezone.now() - started).total_seconds()
        return Outlook(0, max(1.0, typical - elapsed) if typical is not None else None)
    requested = candidate.draft_requested_at or timezone.now()
    ahead = (
        CachedReplyCandidate.objects.filter(_live_drafts())
        .filter(draft_requested_at__lt=requested)
        .exclude(pk=candidate.pk)
        .count()
    )
    return Outlook(ahead, (ahead + 1) * typical if typical is not None else None)


def batch_outlook(batch: Batch, *, typical: float | None = None) -> Outlook:
    """Batches run one after another on a worker (a slice each, drafts first): a queued batch
    waits for the unfinished batches submitted before it and for the drafts waiting."""
    if batch.status not in (Batch.Status.QUEUED, Batch.Status.RUNNING):
        return Outlook(0, None)
    typical = batch_item_seconds() if typical is None else typical
    in_flight = max(1, int(settings.QASSIST_BATCH_CONCURRENCY))
    unfinished = Q(items__status__in=[BatchItem.Status.PENDING, BatchItem.Status.RUNNING])
    own_left = batch.items.filter(
        status__in=[BatchItem.Status.PENDING, BatchItem.Status.RUNNING]
    ).count()
    ahead, items_ahead = 0, 0
    if batch.status == Batch.Status.QUEUED:
        earlier = (
            Batch.objects.filter(
                status__in=[Batch.Status.QUEUED, Batch.Status.RUNNING],
                created_at__lt=batch.created_at,
            )
            .exclude(pk=batch.pk)
            .aggregate(n=Count("id", distinct=True), items=Count("items", filter=unfinished))
        )
        drafts = CachedReplyCandidate.objects.filter(_live_drafts()).count()
        ahead = int(earlier["n"] or 0) + drafts
        items_ahead = int(earlier["items"] or 0)
    if typical is None:
        return Outlook(ahead, None)
    return Outlook(ahead, (items_ahead + own_left) * typical / in_flight)


def duration_text(seconds: float) -> str:
    """'about 40 s', 'about 3 min', 'about 2 h': a wait as a person reads it."""
    if seconds < 55:
        return f"about {max(5, round(seconds / 5) * 5)} s"
    if seconds < 3600:
        return f"about {max(1, round(seconds / 60))} min"
    return f"about {round(seconds / 3600, 1):g} h"
