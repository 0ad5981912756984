"""The indexing pipeline, one document at a time: read → parse → chunk → embed → index.

Run by a Celery task (`knowledge.tasks.index_document`), never in a request. Each stage fails
with a one-line reason a person can act on, stored on the document; an unexpected error is
logged with its traceback and stored as such. A failed document never stops the others, and
its previous version (if any) keeps answering: chunks change in one transaction at the end.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable

import numpy as np
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge import parsers, segment
from knowledge.chunking import ChunkDraft, chunk_blocks
from knowledge.embeddings import EmbeddingError, get_embedder
from knowledge.index import VectorSizeError, pg_store_vectors
from knowledge.models import Chunk, Document, DocumentFile
from knowledge.parsers.base import Parsed
from knowledge.services import index_changed, title_from_filename

logger = logging.getLogger(__name__)

EMBED_BATCH = 16  # passages embedded per call; progress is saved between calls
HEADING_SEPARATOR = " › "


class Stale(Exception):
    """The document was replaced or deleted while it was being indexed."""


def count_tokens(text: str) -> int:
    """Tokens of the chat model (the vocabulary alone, no weights)."""
    from inference.service import get_prompt_counter

    return get_prompt_counter().count_text(text)


def passage_for_embedding(title: str, headings: tuple[str, ...], text: str) -> str:
    """What is embedded for a chunk: its document and section name it, so a passage that
    says "EUR 180 a night" is found by a question about hotels in the travel policy."""
    path = HEADING_SEPARATOR.join([title, *[h for h in headings if h != title]])
    return f"{path}\n{text}"


def _set(document_id: uuid.UUID, version: int, **fields: object) -> None:
    """Update the document, unless a newer version (or a deletion) overtook this run."""
    fields.setdefault("updated_at", timezone.now())
    updated = Document.objects.filter(pk=document_id, version=version).update(**fields)
    if not updated:
        raise Stale


def document_index(*, document_id: uuid.UUID, version: int) -> str:
    """Index one version of a document. Returns the status it ended with ("stale" when a
    newer version or a deletion made this run pointless)."""
    started = time.monotonic()
    try:
        _set(document_id, version, status=Document.Status.INDEXING, progress=0, error="")
        document = Document.objects.get(pk=document_id)
        file = DocumentFile.objects.filter(document_id=document_id).first()
        data = bytes(file.data) if file is not None else b""
        parsed = _parse(data, document.filename)
        drafts = chunk_blocks(parsed, count=count_tokens)
        if parsed.title and document.title == title_from_filename(document.filename):
            document.title = parsed.title[:300]
        if not drafts:
            raise parsers.ParseError("The document holds no text to search.")
        vectors = _embed(document, drafts, lambda pct: _set(document_id, version, progress=pct))
        _store(document, version, parsed, drafts, vectors)
    except Stale:
        return "stale"
    except SoftTimeLimitExceeded:
        _fail(document_id, version, "Indexing took longer than 30 minutes; split the document.")
        return Document.Status.FAILED
    except (parsers.ParseError, VectorSizeError, EmbeddingError) as exc:
        _fail(document_id, version, str(exc))
        return Document.Status.FAILED
    except Exception:
        logger.exception("indexing document %s failed", document_id)
        _fail(document_id, version, "Indexing failed unexpectedly; the error was logged.")
        return Document.Status.FAILED
    logger.info(
        "indexed document %s v%d: %d passages in %.1f s",
        document_id,
        version,
        len(drafts),
        time.monotonic() - started,
    )
    return Document.Status.READY


def _fail(document_id: uuid.UUID, version: int, reason: str) -> None:
    with contextlib.suppress(Stale):
        _set(document_id, version, status=Document.Status.FAILED, error=reason[:300], progress=0)


def _parse(data: bytes, filename: str) -> Parsed:
    """The file parsed in a child process under hard limits (knowledge/parsers/sandbox.py)."""
    from knowledge.parsers.sandbox import parse_isolated

    return parse_isolated(
        data,
        parsers.detect(data, filename),
        max_pages=int(settings.QASSIST_KNOWLEDGE_MAX_PAGES),
        memory_mb=int(settings.QASSIST_KNOWLEDGE_PARSE_MEMORY_MB),
        seconds=float(settings.QASSIST_KNOWLEDGE_PARSE_SECONDS),
    )


def _embed(
    document: Document, drafts: list[ChunkDraft], progress: Callable[[int], None]
) -> np.ndarray:
    embedder = get_embedder()
    texts = [passage_for_embedding(document.title, d.headings, d.text) for d in drafts]
    parts = []
    for start in range(0, len(texts), EMBED_BATCH):
        parts.append(embedder.embed_passages(texts[start : start + EMBED_BATCH]))
        progress(min(99, round(100 * (start + EMBED_BATCH) / len(texts))))
    return np.vstack(parts).astype(np.float32)


@transaction.atomic
def _store(
    document: Document, version: int, parsed: Parsed, drafts: list[ChunkDraft], vectors: np.ndarray
) -> None:
    current = Document.objects.select_for_update().filter(pk=document.pk).first()
    if current is None or current.version != version:
        raise Stale
    embedder = get_embedder()
    Chunk.objects.filter(document=current).delete()
    chunks = Chunk.objects.bulk_create(
        Chunk(
            document=current,
            tenant_id=current.tenant_id,
            session_id=current.session_id,
            version=version,
            ordinal=i,
            headings=HEADING_SEPARATOR.join(d.headings)[:500],
            page=d.page,
            page_end=d.page_end,
            text=d.text,
            cjk=segment.mostly_cjk(d.text),
            tokens=d.tokens,
            search_text=segment.search_text(
                passage_for_embedding(current.title, d.headings, d.text)
            ),
            embedding=vectors[i].tobytes(),
            embedder=embedder.name,
            audience=current.audience,  # read under the row lock: document_set_groups waits
        )
        for i, d in enumerate(drafts)
    )
    pg_store_vectors(chunks)
    if parsed.title and current.title == title_from_filename(current.filename):
        current.title = parsed.title[:300]  # the document's own title, not its file's name
    current.status = Document.Status.READY
    current.progress = 100
    current.error = ""
    current.pages = parsed.pages
    current.chunk_count = len(chunks)
    current.indexed_at = current.updated_at = timezone.now()
    current.save()
    index_changed(tenant_id=current.tenant_id)
