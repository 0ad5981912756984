"""Celery tasks: each takes ids and calls one service."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task
from django.db import transaction

from knowledge import ingest
from knowledge.models import Document

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=1800, time_limit=1900)
def index_document(document_id: str, version: int) -> str:
    """Index one version of a document (knowledge/ingest.py). Queued per document, so
    thousands of uploads wait their turn in the broker and never in a web request."""
    return ingest.document_index(document_id=uuid.UUID(document_id), version=version)


def _send(document_id: uuid.UUID, version: int) -> None:
    # A file attached to a conversation has someone waiting to ask about it: it goes ahead of
    # the knowledge base's documents (settings.CELERY_QUEUES_IN_ORDER).
    attached = Document.objects.filter(pk=document_id, session__isnull=False).exists()
    try:
        index_document.apply_async(
            (str(document_id), version), queue="interactive" if attached else "knowledge"
        )
    except Exception as exc:  # the broker is away: the upload stands, beat queues it later
        logger.warning("could not queue document %s for indexing: %s", document_id, exc)
        Document.objects.filter(pk=document_id, version=version).update(needs_dispatch=True)
    else:
        Document.objects.filter(pk=document_id, needs_dispatch=True).update(needs_dispatch=False)


def index_dispatch(*, document_id: uuid.UUID, version: int) -> None:
    """Queue the indexing once the upload's transaction commits."""
    transaction.on_commit(lambda: _send(document_id, version))


@shared_task
def dispatch_pending() -> int:
    """Scheduled by beat: documents whose indexing could not be queued are queued now."""
    pending = list(Document.objects.filter(needs_dispatch=True).values_list("id", "version")[:1000])
    for document_id, version in pending:
        _send(document_id, version)
    return len(pending)
