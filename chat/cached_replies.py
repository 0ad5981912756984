"""Business rules for curating cached replies: testing phrasings, learning candidates from
recurring first questions, drafting answers with the model, CSV import and export.

The lookup on the hot path is `chat.services.cached_reply_lookup`; the index behind it is
`chat.cache`. Admin views and actions, and Celery tasks, call these functions.
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chat.cache import normalize_question, reply_keys
from chat.models import CachedReply, CachedReplyCandidate
from inference.types import ChatMessage, Delta, Done, Failed
from tenants.models import Tenant


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


def candidate_promote(*, candidate: CachedReplyCandidate, user: User | None) -> CachedReply:
    """A cached reply made from the candidate, disabled until staff have read and enabled it:
    the reviewed draft if there is one, else the model's latest answer."""
    if candidate.promoted_to is not None:
        return candidate.promoted_to
    use_draft = candidate.draft_status == CachedReplyCandidate.DraftStatus.READY
    reply = CachedReply(
        tenant=candidate.tenant,
        question=candidate.question,
        answer=candidate.draft_answer if use_draft else candidate.last_answer,
        enabled=False,
        created_by=user,
    )
    reply.full_clean()
    with transaction.atomic():
        reply.save()
        candidate.promoted_to = reply
        candidate.save(update_fields=["promoted_to"])
    return reply


def candidate_draft_start(*, candidate: CachedReplyCandidate) -> bool:
    """Mark a draft as wanted; False if one is being written already."""
    updated = (
        CachedReplyCandidate.objects.filter(pk=candidate.pk)
        .exclude(draft_status=CachedReplyCandidate.DraftStatus.PENDING)
        .update(draft_status=CachedReplyCandidate.DraftStatus.PENDING, draft_error="")
    )
    return bool(updated)


def draft_request(*, candidate: CachedReplyCandidate) -> list[ChatMessage]:
    """What the model is asked: what a member would see, the tenant's system prompt first."""
    messages = []
    if candidate.tenant.system_prompt.strip():
        messages.append(ChatMessage("system", candidate.tenant.system_prompt))
    messages.append(ChatMessage("user", candidate.question))
    return messages


def candidate_draft_answer(*, candidate_id: int) -> CachedReplyCandidate:
    """Ask the model for an answer at background priority (only on spare sequences, after every
    reply people wait for) and store it as a draft for review."""
    from chat.services import default_sampling
    from inference.service import get_engine_client
    from inference.worker import Submission

    candidate = CachedReplyCandidate.objects.select_related("tenant").get(pk=candidate_id)
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
        async for event in get_engine_client().generate(sub):
            if isinstance(event, Delta):
                parts.append(event.text)
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
    candidate.save(update_fields=["draft_answer", "draft_error", "draft_status"])
    return candidate


# --- CSV import and export -------------------------------------------------------------------

CSV_COLUMNS = [
    "tenant",
    "question",
    "alternatives",
    "answer",
    "enabled",
    "expires_at",
    "hits",
    "last_hit_at",
    "created_at",
    "created_by",
]
_TRUE = {"true", "1", "yes", "y"}
_FALSE = {"false", "0", "no", "n"}


def cached_replies_export(*, replies: Iterable[CachedReply]) -> str:
    """Every field of `replies` as CSV (UTF-8 text; the tenant by slug, empty for every
    tenant; alternatives one per line inside their cell; times in ISO 8601)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for reply in replies:
        writer.writerow(
            [
                reply.tenant.slug if reply.tenant else "",
                reply.question,
                reply.alternatives,
                reply.answer,
                "true" if reply.enabled else "false",
                _iso(reply.expires_at),
                reply.hits,
                _iso(reply.last_hit_at),
                _iso(reply.created_at),
                reply.created_by.get_username() if reply.created_by else "",
            ]
        )
    return out.getvalue()


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


class CachedReplyImportError(Exception):
    """The file was refused; nothing was imported. `errors` name their line numbers."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class ImportResult:
    created: int
    updated: int


def cached_replies_import(
    *, text: str, tenants: QuerySet[Tenant] | None, user: User | None
) -> ImportResult:
    """Create or update cached replies from CSV `text` (the export's columns; `question` and
    `answer` required, others optional). A row updates the reply with the same tenant and
    question (after normalisation) and creates one otherwise. All or nothing: a bad row is
    reported with its line number and no row is imported. `tenants`: the tenants the caller
    may import into (None: any, and replies for every tenant)."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = reader.fieldnames or []
    missing = [name for name in ("question", "answer") if name not in header]
    unknown = [name for name in header if name not in CSV_COLUMNS]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing column(s) {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown column(s) {', '.join(unknown)}")
        raise CachedReplyImportError([f"line 1: {'; '.join(problems)}"])
    errors: list[str] = []
    created = updated = 0
    allowed = {t.slug: t for t in (tenants if tenants is not None else Tenant.objects.all())}
    with transaction.atomic():
        line = reader.line_num + 1
        for row in reader:
            try:
                was_created = _import_row(row, allowed, tenants is None, user)
            except ValidationError as error:
                errors.append(f"line {line}: {_messages(error)}")
            else:
                created += was_created
                updated += not was_created
            line = reader.line_num + 1
        if errors:
            transaction.set_rollback(True)
    if errors:
        raise CachedReplyImportError(errors)
    return ImportResult(created=created, updated=updated)


def _messages(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
    return " ".join(error.messages)


def _import_row(
    row: dict[str | None, str | list[str] | None],
    allowed: dict[str, Tenant],
    may_be_global: bool,
    user: User | None,
) -> bool:
    if None in row:
        raise ValidationError("more cells than columns")
    cells = {str(k): (v if isinstance(v, str) else "") for k, v in row.items()}
    slug = cells.get("tenant", "").strip()
    if slug:
        tenant = allowed.get(slug)
        if tenant is None:
            raise ValidationError({"tenant": [f"no tenant “{slug}” you may import into"]})
    elif not may_be_global:
        raise ValidationError({"tenant": ["required: replies for every tenant are superusers'"]})
    else:
        tenant = None
    question = cells.get("question", "")
    key = normalize_question(question)
    existing = (
        CachedReply.objects.filter(tenant=tenant, normalized_key=key).first() if key else None
    )
    reply = existing or CachedReply(tenant=tenant, created_by=user)
    reply.question = question
    reply.answer = cells.get("answer", "")
    if "alternatives" in cells:
        reply.alternatives = cells["alternatives"]
    if "enabled" in cells:
        reply.enabled = _boolean(cells["enabled"], "enabled")
    if "expires_at" in cells:
        reply.expires_at = _datetime(cells["expires_at"], "expires_at")
    if cells.get("hits", "").strip():
        try:
            reply.hits = int(cells["hits"])
        except ValueError:
            raise ValidationError({"hits": ["not a whole number"]}) from None
    if "last_hit_at" in cells:
        reply.last_hit_at = _datetime(cells["last_hit_at"], "last_hit_at")
    if cells.get("created_at", "").strip():
        reply.created_at = _datetime(cells["created_at"], "created_at") or reply.created_at
    if cells.get("created_by", "").strip():
        # An account unknown here (another deployment) leaves the field as it was.
        reply.created_by = (
            User.objects.filter(username=cells["created_by"].strip()).first() or reply.created_by
        )
    reply.full_clean(validate_unique=False)
    reply.save()
    return existing is None


def _boolean(raw: str, field: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE or value == "":  # empty: enabled, the model's default
        return True
    if value in _FALSE:
        return False
    raise ValidationError({field: [f"“{raw}” is neither true nor false"]})


def _datetime(raw: str, field: str) -> datetime | None:
    if not raw.strip():
        return None
    value = parse_datetime(raw.strip())
    if value is None:
        raise ValidationError({field: [f"“{raw}” is not a date and time (ISO 8601)"]})
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value
