"""The cached-reply lookup on the hot path: a curated answer for a single-turn question, read
from the in-process index (chat/cache.py). Curating them: chat.cached_replies."""

from __future__ import annotations

from django.db.models import F
from django.utils import timezone

from chat.cache import get_index
from chat.cached_replies import cached_reply_readable
from chat.models import CachedReply
from chat.question_keys import normalize_question
from inference.types import ChatMessage
from knowledge.access import PUBLIC, Reader
from tenants.models import Tenant


def first_turn_question(conversation: list[ChatMessage]) -> str | None:
    """The question if `conversation` is a single user message (a system prompt aside);
    None for a multi-turn context, whose meaning depends on what came before (GPTCache's
    wrong-answer trap): never answered from, nor counted towards, the cache."""
    turns = [m for m in conversation if m.role != "system"]
    if len(turns) != 1 or turns[0].role != "user":
        return None
    return turns[0].content


def cached_reply_lookup(
    *, tenant: Tenant, conversation: list[ChatMessage], reader: Reader = PUBLIC
) -> CachedReply | None:
    """A curated answer for a single-turn question: the tenant's own if one is in force, else
    the one for every tenant, unless it rests on documents `reader` may not read. Reads the
    in-process index (chat/cache.py): no database query while the table is unchanged; a hit
    costs one UPDATE of its counter. The returned reply is shared by the process: read it, do
    not change it."""
    question = first_turn_question(conversation)
    if question is None:
        return None
    key = normalize_question(question)
    if not key:
        return None
    now = timezone.now()
    reply = get_index().lookup(tenant_id=tenant.id, key=key, now=now)
    if reply is not None and not cached_reply_readable(reply=reply, reader=reader):
        return None  # the question goes to the model, which reads what this asker may read
    if reply is not None:
        CachedReply.objects.filter(id=reply.id).update(hits=F("hits") + 1, last_hit_at=now)
    return reply


def cached_reply_would_answer(
    *, tenant: Tenant, conversation: list[ChatMessage], reader: Reader = PUBLIC
) -> bool:
    """Whether `cached_reply_lookup` would find a curated answer for `reader` (no hit is
    counted): such a question needs no passages."""
    question = first_turn_question(conversation)
    key = normalize_question(question) if question is not None else ""
    if not key:
        return False
    reply = get_index().lookup(tenant_id=tenant.id, key=key, now=timezone.now())
    return reply is not None and cached_reply_readable(reply=reply, reader=reader)
