"""Celery tasks: each takes ids (or nothing) and calls one service."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from sources import services, sync
from sources.models import SourceRun

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=900, time_limit=960)
def sync_source(run_id: int) -> str:
    """One slice of a source's sync (sources/sync.py)."""
    return sync.run_slice(run_id=run_id)


def _send(run_id: int) -> None:
    try:
        sync_source.apply_async((run_id,), queue="knowledge")
    except Exception as exc:  # the broker is away: beat sends it once the run looks idle
        logger.warning("could not queue the sync run %s: %s", run_id, exc)
    else:
        SourceRun.objects.filter(pk=run_id).update(dispatched_at=timezone.now())


def sync_dispatch(*, run_id: int) -> None:
    """Queue a slice of the run once the caller's transaction commits."""
    transaction.on_commit(lambda: _send(run_id))


@shared_task
def sources_tick() -> dict[str, int]:
    """Scheduled by beat: sources due are synced, and runs whose slice died are sent on."""
    return services.sources_tick()
