"""Business rules for curating cached replies: testing phrasings, learning candidates from
recurring first questions, drafting answers with the model. CSV import and export:
`chat.cached_reply_csv`.

The lookup on the hot path is `chat.services.cached_lookup.cached_reply_lookup`; the index
behind it is `chat.cache`, matching by the keys of `chat.question_keys`. Admin views and
actions, and Celery tasks, call these functions.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from chat.models import (
    CachedReply,
    CachedReplyCandidate,
)
from chat.question_keys import normalize_question, reply_keys
from inference.types import ChatMessage, Delta, Done, Failed
from knowledge.access import Reader
from tenants.models import Tenant

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PhraseTest:
    """What `cached_reply_test_phrase` found: the reply that would answer, or why none would."""

    key: str
    reply: CachedReply | None
    explanation: str


def cached_reply_test_phrase(
    *, tenant: Tenant | None, phrase: str, follow_up: bool = False
) -> PhraseTest:
    """Would `phrase`, asked by a member of `tenant` (None: a tenant with no replies of its
    own), be answered from the cache, and by which reply? Reads the table (admin, not hot path)
    so that it can also say when a disabled or expired reply has this phrasing."""
    key = normalize_question(phrase)
    if not key:
        return PhraseTest(key, None, "Only punctuation or spaces: nothing can match it.")
    if follow_up:
        return PhraseTest(
            key,
            None,
            "Never from the cache as a follow-up: only a conversation's first message is "
            "answered from the cache.",
        )
    scopes = Q(tenant__isnull=True) if tenant is None else Q(tenant=tenant) | Q(tenant__isnull=True)
    now = timezone.now()
    matching = [r for r in CachedReply.objects.filter(scopes) if key in reply_keys(r)]
    # A tenant's own reply in force wins over the one for every tenant.
    matching.sort(key=lambda r: (r.tenant_id is None, r.id))
    for reply in matching:
        if reply.enabled and (reply.expires_at is None or reply.expires_at > now):
            whose = "this tenant's own reply" if reply.tenant_id else "the reply for every tenant"
            return PhraseTest(key, reply, f"Answered from the cache by {whose} “{reply}”.")
    if matching:
        reply = matching[0]
        why = "is disabled" if not reply.enabled else "has expired"
        return PhraseTest(key, None, f"Not answered: the cached reply “{reply}” {why}.")
    return PhraseTest(
        key,
        None,
        f"Not answered from the cache: no question or alternative phrasing normalises to "
        f"“{key}”. Matching is exact after normalisation; add this wording as an alternative "
        "phrasing if it should be.",
    )


def cached_replies_set_enabled(
    *, replies: QuerySet[CachedReply], enabled: bool
) -> list[CachedReply]:
    """Switch replies on or off; returns those that changed. Saved one by one so every process's
    cache index hears of it (bulk updates skip the signals that invalidate it)."""
    changed: list[CachedReply] = []
    for reply in replies.exclude(enabled=enabled):
        reply.enabled = enabled
        reply.save(update_fields=["enabled", "updated_at"])
        changed.append(reply)
    return changed


# --- candidates ------------------------------------------------------------------------------


def candidate_record(
    *, tenant: Tenant, question: str, answer: str, at: datetime | None = None
) -> CachedReplyCandidate | None:
    """Count one more time `question` was a conversation's first message, answered by the
    model with `answer`. Safe under concurrency: one row per tenant and normalised key."""
    key = normalize_question(question)
    if not key:
        return None
    at = at or timezone.now()
    rows = CachedReplyCandidate.objects.filter(tenant=tenant, normalized_key=key)
    changes = {"question": question, "last_answer": answer, "last_asked_at": at}
    if not rows.update(count=F("count") + 1, **changes):
        try:
            with transaction.atomic():
                return CachedReplyCandidate.objects.create(
                    tenant=tenant, normalized_key=key, count=1, first_asked_at=at, **changes
                )
        except IntegrityError:  # recorded by another process meanwhile
            rows.update(count=F("count") + 1, **changes)
    return rows.first()


def candidates_recurring(
    *, queryset: QuerySet[CachedReplyCandidate], min_count: int
) -> QuerySet[CachedReplyCandidate]:
    return queryset.filter(count__gte=min_count)


# What a cached reply keeps of its answer's sources: enough to list them and open the passage,
# and who may read them (their documents' audience then, for when a document is gone).
SOURCE_KEYS = (
    "number",
    "title",
    "where",
    "passage_id",
    "document_id",
    "snippet",
    "quotes",
    "audience",
)


def _document_key(document_id: object) -> uuid.UUID | None:
    if not isinstance(document_id, str) or not document_id.startswith("doc-"):
        return None
    try:
        return uuid.UUID(document_id.removeprefix("doc-"))
    except ValueError:
        return None


def sources_audiences(sources: list[dict[str, Any]]) -> list[str]:
    """Who may read each source (its document's audience now; once the document is gone, the
    audience it was stored with), in the sources' order."""
    from knowledge.models import Document

    keys = [_document_key(s.get("document_id")) for s in sources]
    current = dict(
        Document.objects.filter(id__in=[k for k in keys if k is not None]).values_list(
            "id", "audience"
        )
    )
    return [
        current.get(key, str(source.get("audience") or "")) if key is not None else ""
        for key, source in zip(keys, sources, strict=True)
    ]


def cached_reply_readable(*, reply: CachedReply, reader: Reader) -> bool:
    """Whether `reader` may be served `reply`: a reply made from an answer rests on its
    sources, and one resting on a document limited to groups the asker is not in is not theirs
    to read (they are answered by the model, from what they may read)."""
    if not reply.sources or reader.reads_everything:
        return True
    return all(reader.may_read(a) for a in sources_audiences(list(reply.sources)))


def cached_reply_evidence(reply: CachedReply) -> dict[str, Any]:
    """The evidence a served cached reply carries: its sources, each with its quotes."""
    shown = [s for s in reply.sources or [] if not s.get("hidden")]
    if not shown:
        return {}
    return {
        "verdict": "cached",
        "quotes": {str(s["number"]): list(s.get("quotes") or []) for s in shown},
        "unsupported": [],
        "earlier": [
            {**{k: v for k, v in s.items() if k not in ("quotes", "audience")}, "cited": True}
            for s in shown
        ],
    }


def candidate_promote(
    *,
    candidate: CachedReplyCandidate,
    user: User | None,
    answer: str | None = None,
    sources: list[dict[str, Any]] | None = None,
) -> CachedReply:
    """A cached reply made from the candidate, disabled until staff have read and enabled it:
    `answer` when given (a reply people rated well, feedback.services, with the `sources` it
    rested on and their quotes), else the reviewed draft if there is one, else the model's
    latest answer."""
    if candidate.promoted_to is not None:
        return candidate.promoted_to
    use_draft = candidate.draft_status == CachedReplyCandidate.DraftStatus.READY
    if answer is None:
        answer = candidate.draft_answer if use_draft else candidate.last_answer
    # Every passage the answer's question was given is kept (the model read them all), so
    # that serving the reply follows who may read each; only the cited or quoted ones are
    # shown under it.
    given = list(sources or [])
    reply = CachedReply(
        tenant=candidate.tenant,
        question=candidate.question,
        answer=answer,
        enabled=False,
        created_by=user,
        sources=[
            {
                **{k: v for k, v in source.items() if k in SOURCE_KEYS},
                "audience": audience,
                **({} if source.get("cited") or source.get("quotes") else {"hidden": True}),
            }
            for source, audience in zip(given, sources_audiences(given), strict=True)
        ],
    )
    reply.full_clean()
    with transaction.atomic():
        reply.save()
        candidate.promoted_to = reply
        candidate.save(update_fields=["promoted_to"])
    return reply


# A draft asked for this long ago and not finished is presumed lost (its worker died, its message
# was dropped): it may be asked for again, and batches stop giving way to it.
DRAFT_STALE_SECONDS = 600
# A running draft's text is saved this often, so its page shows it growing.
DRAFT_PROGRESS_SECONDS = 1.0


def candidate_draft_start(*, candidate: CachedReplyCandidate) -> bool:
    """Queue a draft; False if one is queued or being written already (and not stale)."""
    now = timezone.now()
    busy = (CachedReplyCandidate.DraftStatus.PENDING, CachedReplyCandidate.DraftStatus.RUNNING)
    updated = (
        CachedReplyCandidate.objects.filter(pk=candidate.pk)
        .exclude(
            draft_status__in=busy,
            draft_requested_at__gte=now - timedelta(seconds=DRAFT_STALE_SECONDS),
        )
        .update(
            draft_status=CachedReplyCandidate.DraftStatus.PENDING,
            draft_error="",
            draft_requested_at=now,
            draft_started_at=None,
            draft_finished_at=None,
        )
    )
    return bool(updated)


def drafts_waiting() -> bool:
    """Whether a draft someone asked for waits for a worker (and is not presumed lost)."""
    since = timezone.now() - timedelta(seconds=DRAFT_STALE_SECONDS)
    return CachedReplyCandidate.objects.filter(
        draft_status=CachedReplyCandidate.DraftStatus.PENDING, draft_requested_at__gte=since
    ).exists()


def draft_request(*, candidate: CachedReplyCandidate) -> list[ChatMessage]:
    """What the model is asked: what a member would see, the tenant's system prompt first."""
    messages = []
    if candidate.tenant.system_prompt.strip():
        messages.append(ChatMessage("system", candidate.tenant.system_prompt))
    messages.append(ChatMessage("user", candidate.question))
    return messages


def candidate_draft_answer(*, candidate_id: int) -> CachedReplyCandidate:
    """Ask the model for an answer at background priority (only on spare sequences, after every
    reply people wait for) and store it as a draft for review. The text is saved as it grows
    (every DRAFT_PROGRESS_SECONDS), so the candidate's page shows the draft being written."""
    from chat.services.sampling import default_sampling
    from inference.service import get_engine_client
    from inference.worker import Submission

    now = timezone.now()
    CachedReplyCandidate.objects.filter(pk=candidate_id).update(
        draft_status=CachedReplyCandidate.DraftStatus.RUNNING,
        draft_started_at=now,
        draft_finished_at=None,
        draft_answer="",
        draft_error="",
    )
    candidate = CachedReplyCandidate.objects.select_related("tenant").get(pk=candidate_id)
    if candidate.draft_requested_at is None:
        candidate.draft_requested_at = now
    sub = Submission(
        request_id=uuid.uuid4().hex,
        messages=tuple(draft_request(candidate=candidate)),
        params=default_sampling(),
        priority=candidate.tenant.priority - 1,
        background=True,
        tenant=candidate.tenant.slug,
    )

    async def generate() -> tuple[str, str]:
        parts: list[str] = []
        saved_at = time.monotonic()
        async for event in get_engine_client().generate(sub):
            if isinstance(event, Delta):
                parts.append(event.text)
                if time.monotonic() - saved_at >= DRAFT_PROGRESS_SECONDS:
                    saved_at = time.monotonic()
                    await database_sync_to_async(_draft_progress)(candidate_id, "".join(parts))
            elif isinstance(event, Failed):
                return "", event.message
            elif isinstance(event, Done) and event.finish_reason not in ("stop", "length"):
                return "", f"The model stopped ({event.finish_reason})."
        return "".join(parts).strip(), ""

    try:
        text, error = async_to_sync(generate)()
    except Exception as exc:  # stored for staff to read; the task itself must not crash-loop
        text, error = "", f"The draft failed: {exc}"
    if not text and not error:
        error = "The model gave an empty answer."
    candidate.draft_answer = text
    candidate.draft_error = error
    candidate.draft_status = (
        CachedReplyCandidate.DraftStatus.FAILED if error else CachedReplyCandidate.DraftStatus.READY
    )
    candidate.draft_finished_at = timezone.now()
    candidate.save(
        update_fields=[
            "draft_answer",
            "draft_error",
            "draft_status",
            "draft_requested_at",
            "draft_finished_at",
        ]
    )
    return candidate


def _draft_progress(candidate_id: int, text: str) -> None:
    CachedReplyCandidate.objects.filter(
        pk=candidate_id, draft_status=CachedReplyCandidate.DraftStatus.RUNNING
    ).update(draft_answer=text)
