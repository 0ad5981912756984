"""Company knowledge's side of passage KV computed once (inference.passages): where passages
are in a prompt, and which passages a tenant's documents hold. Registered with the engine's
builder when the app is ready (knowledge/apps.py); the engine calls `passage_source` only when
it is idle, on its own thread."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import close_old_connections, connection

from inference.prompt_passages import PassageSet
from inference.types import ChatMessage
from knowledge import prompt, turns
from knowledge.models import Chunk, KnowledgeBase

find_passages = prompt.passage_spans


def passage_source(known: Mapping[str, int]) -> list[PassageSet]:
    """The passages of every tenant whose index changed since the version the engine has
    (`known`: tenant slug -> index version): the knowledge base's to compute, newest documents
    first, and every passage still held (attachments too) so that the rest is dropped."""
    _renew_connections()
    try:
        sets = []
        bases = KnowledgeBase.objects.exclude(mode=KnowledgeBase.Mode.OFF).select_related("tenant")
        for base in bases:
            tenant = base.tenant
            if known.get(tenant.slug) == base.index_version:
                continue
            chunks = (
                Chunk.objects.filter(tenant=tenant)
                .select_related("document")
                .order_by("-document__created_at", "document_id", "ordinal")
            )
            warm, live = [], []
            for chunk in chunks:
                body = prompt.passage_body(chunk.document.title, chunk.where, chunk.text)
                live.append(body)
                if chunk.session_id is None:
                    warm.append(body)
            # The opening a question about them starts with (chat.services.turns.system_messages,
            # without a person's own instructions).
            opening = (ChatMessage("system", turns.system_prompt(tenant=tenant)),)
            sets.append(
                PassageSet(tenant.slug, base.index_version, opening, tuple(warm), tuple(live))
            )
        return sets
    finally:
        _renew_connections()


def _renew_connections() -> None:
    """The engine's thread lives long: a connection the database closed meanwhile is renewed
    (never inside a transaction, as in a test)."""
    if not connection.in_atomic_block:
        close_old_connections()
