"""Business rules for feedback on replies: giving it (the chat, REST), and what tenant admins
learn from it in the admin, under the privacy rules (docs/privacy.md).

What is content here, and so shown in the admin only under the tenant's content audit (each
reading logged, chat.content_audit): the text of a question or a reply, and a person's own
comment. What is not: that a reply was rated, up or down, with which of the fixed reasons, when
and by whom — like a message's status. One exception, the same as the cached-reply candidates'
and stated to employees in the chat: a conversation's first question asked at least
QASSIST_CANDIDATE_MIN_COUNT times is shown in the wording the candidates list shows, without
names; its model answer too, unless files were attached to that conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone

from chat.cached_replies import candidate_promote
from chat.content_audit import owner_name, readable_tenants
from chat.models import CachedReply, CachedReplyCandidate, ChatSession, ContentRead, Message
from chat.question_keys import normalize_question
from chat.services.api import api_completion_get
from chat.services.checks import ChatError
from chat.services.replies import message_data
from chat.services.sessions import session_get
from feedback.models import Feedback
from knowledge.access import PUBLIC, reader_for_api_key, reader_for_user
from tenants.models import ApiKey, Tenant

MAX_COMMENT_CHARS = 500
REASONS = {choice.value for choice in Feedback.Reason}
REPORT_ROWS = 50  # rows per table of the admin's feedback page
REPORT_SCAN = 5000  # the latest feedback (or unanswered questions) a report reads


# --- checks on input -----------------------------------------------------------------------


@dataclass(frozen=True)
class Rating:
    rating: str
    reason: str = ""
    comment: str = ""


def check_rating(*, rating: Any, reason: Any = "", comment: Any = "") -> Rating:
    """A rating as sent by the page or an integration: `up` or `down`, a reason (only with
    `down`: wrong, outdated, not_helpful, other) and a comment of at most 500 characters."""
    if rating not in (Feedback.Rating.UP, Feedback.Rating.DOWN):
        raise ChatError("invalid_rating", "Rate a reply `up` or `down`.", param="rating")
    reason = "" if reason is None else reason
    if not isinstance(reason, str) or reason not in REASONS:
        raise ChatError(
            "invalid_reason",
            "The reason is one of wrong, outdated, not_helpful or other (or empty).",
            param="reason",
        )
    if reason and rating == Feedback.Rating.UP:
        raise ChatError(
            "invalid_reason", "A reason says what was wrong: give it with `down`.", param="reason"
        )
    comment = "" if comment is None else comment
    if not isinstance(comment, str):
        raise ChatError("invalid_comment", "Give the comment as text.", param="comment")
    comment = comment.strip()
    if "\x00" in comment or not _is_unicode(comment):
        raise ChatError("invalid_comment", "The comment is not valid text.", param="comment")
    if len(comment) > MAX_COMMENT_CHARS:
        raise ChatError(
            "invalid_comment",
            f"The comment is {len(comment)} characters long; the limit is {MAX_COMMENT_CHARS}.",
            param="comment",
        )
    return Rating(str(rating), reason, comment)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- giving feedback -------------------------------------------------------------------------


def _own_reply(*, user: User, tenant: Tenant, message_id: int) -> Message:
    """A reply in one of the user's own live conversations in `tenant`; anything else — a
    colleague's, another tenant's, a question, an archived conversation's — is a 404."""
    reply = (
        Message.objects.filter(id=message_id, role=Message.Role.ASSISTANT)
        .only("id", "session_id", "status")
        .first()
    )
    if reply is None:
        raise Http404("No such reply.")
    session_get(user=user, session_id=reply.session_id, tenant=tenant)
    return reply


def _upsert(
    *, reply: Message, tenant_id: int, user: User | None, rating: Rating, **extra: Any
) -> Feedback:
    if reply.status == Message.Status.STREAMING:
        raise ChatError("reply_not_finished", "Wait for the reply to end before rating it.")
    values = {
        "tenant_id": tenant_id,
        "rating": rating.rating,
        "reason": rating.reason,
        "comment": rating.comment,
        "updated_at": timezone.now(),
        **extra,
    }
    rows = Feedback.objects.filter(message=reply, user=user)
    if rows.update(**values):
        return rows.get()
    try:
        with transaction.atomic():
            return Feedback.objects.create(message=reply, user=user, **values)
    except IntegrityError:  # given at the same moment from another tab
        rows.update(**values)
        return rows.get()


def feedback_set(*, user: User, tenant: Tenant, message_id: int, rating: Rating) -> Feedback:
    """The user's rating of one version of a reply, replacing the one they gave before."""
    reply = _own_reply(user=user, tenant=tenant, message_id=message_id)
    return _upsert(reply=reply, tenant_id=tenant.pk, user=user, rating=rating)


def feedback_clear(*, user: User, tenant: Tenant, message_id: int) -> bool:
    """Take the user's rating of a reply back; False if there was none."""
    reply = _own_reply(user=user, tenant=tenant, message_id=message_id)
    deleted, _ = Feedback.objects.filter(message=reply, user=user).delete()
    return bool(deleted)


def feedback_completion_set(
    *,
    tenant: Tenant,
    api_key_id: int | None,
    session_id: uuid.UUID,
    rating: Rating,
) -> tuple[ChatSession, Feedback]:
    """An integration's rating of a completion (any key of its tenant that may read what it
    rests on; one per completion, replaced by the next)."""
    api_key = ApiKey.objects.filter(pk=api_key_id, tenant=tenant).first() if api_key_id else None
    reader = reader_for_api_key(api_key=api_key) if api_key is not None else PUBLIC
    session, reply = api_completion_get(tenant=tenant, session_id=session_id, reader=reader)
    feedback = _upsert(
        reply=reply, tenant_id=tenant.pk, user=None, rating=rating, api_key_id=api_key_id
    )
    return session, feedback


def feedback_data(feedback: Feedback | None) -> dict[str, Any] | None:
    if feedback is None:
        return None
    return {
        "rating": feedback.rating,
        "reason": feedback.reason,
        "comment": feedback.comment,
        "updated_at": feedback.updated_at.isoformat(),
    }


def feedback_by_reply(*, user: User, message_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The user's own ratings of these replies, by reply id (the page shows them pressed)."""
    rows = Feedback.objects.filter(user=user, message_id__in=list(message_ids))
    return {row.message_id: feedback_data(row) or {} for row in rows}


def messages_with_feedback(*, user: User, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Message objects (chat.services.replies.message_data) with `feedback` on each reply: the
    user's rating of that version, or null."""
    replies = [m["id"] for m in messages if m.get("role") == Message.Role.ASSISTANT]
    given = feedback_by_reply(user=user, message_ids=replies) if replies else {}
    for m in messages:
        if m.get("role") == Message.Role.ASSISTANT:
            m["feedback"] = given.get(m["id"])
    return messages


# --- counts, for the usage pages -------------------------------------------------------------


@dataclass(frozen=True)
class FeedbackCounts:
    up: int
    down: int
    reasons: dict[str, int]

    @property
    def total(self) -> int:
        return self.up + self.down

    @property
    def reason_list(self) -> list[tuple[str, int]]:
        """The reasons of thumbs down, most given first, in words."""
        labels = dict(Feedback.Reason.choices)
        return [
            (str(labels.get(code, code)), n)
            for code, n in sorted(self.reasons.items(), key=lambda kv: -kv[1])
        ]


def feedback_counts(
    *,
    tenants: QuerySet[Tenant] | None,
    start: date,
    end: date,
    user_id: int | None = None,
    api_key_id: int | None = None,
) -> FeedbackCounts:
    """Ratings given (or last changed) from `start` to `end` (local days, inclusive), in
    `tenants` (None: all), by one person or key when given. Counts only: no text."""
    zone = timezone.get_current_timezone()
    rows = Feedback.objects.filter(
        updated_at__gte=datetime.combine(start, time.min, zone),
        updated_at__lte=datetime.combine(end, time.max, zone),
    )
    if tenants is not None:
        rows = rows.filter(tenant__in=tenants)
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    if api_key_id is not None:
        rows = rows.filter(api_key_id=api_key_id)
    counts = {r["rating"]: r["n"] for r in rows.values("rating").annotate(n=Count("id"))}
    reasons = {
        r["reason"]: r["n"]
        for r in rows.filter(rating=Feedback.Rating.DOWN)
        .exclude(reason="")
        .values("reason")
        .annotate(n=Count("id"))
    }
    return FeedbackCounts(counts.get("up", 0), counts.get("down", 0), reasons)


# --- what the admin learns from it -----------------------------------------------------------


@dataclass
class ReportRow:
    """One question (its normalised wording, in one tenant) and how its replies were rated."""

    tenant: Tenant
    key: str
    up: int = 0
    down: int = 0
    asked: int = 0  # unanswered questions: how often
    last_at: datetime | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    question: str | None = None  # None: not shown (see `hidden`)
    answer: str | None = None  # best-rated answers: the reply's text, when shown
    reply_id: int | None = None  # best-rated answers: the reply to make a cached reply of
    cached_reply: CachedReply | None = None  # already made from this question
    hidden: str = ""  # why the text is not shown
    # Shown without any text (issue #31): the passages the down-voted replies cited, by
    # document and section ("Handbook › Travel"), and how many of them the support check
    # warned about or that declined (the documents had nothing on the question).
    cited: dict[str, int] = field(default_factory=dict)
    warned: int = 0
    declined: int = 0
    _latest: Message | None = field(default=None, repr=False)
    _first_only: bool = field(default=True, repr=False)
    _best_score: int = field(default=-(10**9), repr=False)
    _attached: bool = field(default=False, repr=False)

    @property
    def cited_text(self) -> str:
        return ", ".join(
            f"{name} ({n})" if n > 1 else name
            for name, n in sorted(self.cited.items(), key=lambda kv: (-kv[1], kv[0]))
        )

    @property
    def reason_text(self) -> str:
        labels = dict(Feedback.Reason.choices)
        return ", ".join(
            f"{labels.get(code, code)} {n}"
            for code, n in sorted(self.reasons.items(), key=lambda kv: -kv[1])
        )


@dataclass
class Report:
    worst: list[ReportRow]
    best: list[ReportRow]
    unanswered: list[ReportRow]
    min_count: int = 2


HIDDEN_RARE = (
    "Not shown: asked fewer than {n} times as a first question, and the tenant's content "
    "audit is off."
)
HIDDEN_FOLLOW_UP = (
    "Not shown: a follow-up question (its meaning depends on the conversation), and the "
    "tenant's content audit is off."
)
HIDDEN_ATTACHED = (
    "Not shown: files were attached to that conversation, and the tenant's content audit is off."
)
HIDDEN_GROUPS = (
    "Not shown: the answer rests on documents limited to groups you are not in "
    "(under the content audit too)."
)


def _earlier(session_path: str, question_path: str) -> Exists:
    """Whether the conversation has turns stored before the question (an integration's own
    system message is no turn)."""
    return Exists(
        Message.objects.filter(
            session_id=OuterRef(session_path), id__lt=OuterRef(question_path)
        ).exclude(role=Message.Role.SYSTEM)
    )


def _follow_up(question: Message, session: ChatSession, earlier: bool) -> bool:
    """Whether a question follows earlier turns (so its meaning depends on them). A chat's
    messages link to the one they follow (an edited first question is a first question too);
    an integration's, stored as sent, are in order."""
    if question.parent_id is not None:
        return True
    return session.branch_tip_id is None and earlier


def _common_candidates(
    tenant_keys: set[tuple[int, str]],
) -> dict[tuple[int, str], CachedReplyCandidate]:
    """The candidates (first questions asked at least QASSIST_CANDIDATE_MIN_COUNT times) among
    these (tenant, key) pairs: their wording is already listed to the tenant's admins."""
    if not tenant_keys:
        return {}
    tenants = {t for t, _ in tenant_keys}
    keys = {k for _, k in tenant_keys}
    rows = CachedReplyCandidate.objects.select_related("promoted_to").filter(
        tenant_id__in=tenants,
        normalized_key__in=keys,
        count__gte=settings.QASSIST_CANDIDATE_MIN_COUNT,
    )
    return {(c.tenant_id, c.normalized_key): c for c in rows}


def _attached_sessions(session_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    from knowledge.models import Document

    return set(
        Document.objects.filter(session_id__in=session_ids).values_list("session_id", flat=True)
    )


def feedback_report(
    *, reader: AbstractBaseUser | AnonymousUser, tenants: QuerySet[Tenant] | None
) -> Report:
    """The admin's feedback page for `tenants` (None: all): the worst-rated questions, the
    best-rated answers to first questions (each may become a cached reply), and the questions
    the documents had nothing on. Texts follow the rules at the top of this module; every text
    shown under the content audit is logged as a reading."""
    readable = set(readable_tenants(user=reader).values_list("id", flat=True))
    worst, best = _rated(tenants)
    unanswered = _unanswered(tenants)
    candidates = _common_candidates(
        {(r.tenant.pk, r.key) for r in [*worst.values(), *best.values(), *unanswered.values()]}
    )
    report = Report(
        worst=sorted(
            (r for r in worst.values() if r.down),
            key=lambda r: (r.up - r.down, -r.down, -(r.last_at or _EPOCH).timestamp()),
        )[:REPORT_ROWS],
        best=sorted(
            (r for r in best.values() if r._best_score > 0),
            key=lambda r: (-r._best_score, -r.up, -(r.last_at or _EPOCH).timestamp()),
        )[:REPORT_ROWS],
        unanswered=sorted(
            unanswered.values(),
            key=lambda r: (-(r.asked + r.warned), -(r.last_at or _EPOCH).timestamp()),
        )[:REPORT_ROWS],
        min_count=int(settings.QASSIST_CANDIDATE_MIN_COUNT),
    )
    reads: list[Message] = []
    for row in [*report.worst, *report.unanswered]:
        reads += _reveal_question(row, readable, candidates, report.min_count)
    for row in report.best:
        reads += _reveal_question(row, readable, candidates, report.min_count)
        if not _answer_readable(row, reader):
            row.answer = None
            row.hidden = HIDDEN_GROUPS
            continue
        reads += _reveal_answer(row, readable, candidates)
    _log_reads(reader, reads)
    return report


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.get_fixed_timezone(0))


def _rated(tenants: QuerySet[Tenant] | None) -> tuple[dict[Any, ReportRow], dict[Any, ReportRow]]:
    """Ratings grouped by question: all of them (worst), and those of replies to first
    questions by reply (best: the best-rated reply of each question)."""
    rows = Feedback.objects.select_related(
        "tenant", "message__parent", "message__session"
    ).annotate(earlier=_earlier("message__session_id", "message__parent_id"))
    if tenants is not None:
        rows = rows.filter(tenant__in=tenants)
    rows = rows.filter(message__parent__isnull=False).order_by("-updated_at")[:REPORT_SCAN]
    worst: dict[Any, ReportRow] = {}
    per_reply: dict[int, list[Feedback]] = {}
    scanned = list(rows)
    passages = _passages_of(
        {fb.message.parent_id for fb in scanned if fb.rating == Feedback.Rating.DOWN}
    )
    for fb in scanned:
        question = fb.message.parent
        assert question is not None
        key = normalize_question(question.content)
        row = worst.setdefault((fb.tenant_id, key), ReportRow(fb.tenant, key))
        _count(row, fb)
        if fb.rating == Feedback.Rating.DOWN:
            _what_it_rested_on(row, fb.message, question, passages.get(question.pk, []))
        if row._latest is None or question.id > row._latest.id:
            row._latest = question
        follow_up = _follow_up(question, fb.message.session, fb.earlier)
        row._first_only = row._first_only and not follow_up
        if not follow_up and not fb.message.served_from_cache:
            per_reply.setdefault(fb.message_id, []).append(fb)
    best: dict[Any, ReportRow] = {}
    attached = _attached_sessions({fbs[0].message.session_id for fbs in per_reply.values()})
    for reply_id, given in per_reply.items():
        reply, question = given[0].message, given[0].message.parent
        assert question is not None
        key = normalize_question(question.content)
        row = best.setdefault((given[0].tenant_id, key), ReportRow(given[0].tenant, key))
        score = sum(1 if fb.rating == Feedback.Rating.UP else -1 for fb in given)
        for one in given:
            _count(row, one)
        if score > row._best_score:
            row._best_score = score
            row.reply_id = reply_id
            row._latest = question
            row._attached = reply.session_id in attached
            row.answer = reply.content  # kept only if it may be shown (_reveal_answer)
    return worst, best


# The support check's verdicts the chat shows a warning for (static/chat/modules/messages.js).
WARNED_VERDICTS = ("unsupported", "not_found")


def _passages_of(question_ids: set[int | None]) -> dict[int, list[Any]]:
    """The passages each question was given (knowledge.Passage), in one query."""
    from knowledge.models import Passage

    found: dict[int, list[Any]] = {}
    ids = {i for i in question_ids if i is not None}
    for passage in Passage.objects.filter(message_id__in=ids).order_by("number"):
        found.setdefault(passage.message_id, []).append(passage)
    return found


def _what_it_rested_on(row: ReportRow, reply: Message, question: Message, given: list[Any]) -> None:
    """Count, for a down-voted reply, the passages it cited (by document and section: no
    text), and whether it was warned about or declined."""
    from knowledge.turns import NONE_FOUND, sources_of

    evidence = reply.evidence or {}
    for source in sources_of(given, reply_text=reply.content, evidence=evidence):
        if source["cited"] or source["quotes"]:
            name = str(source["title"]) + (f" › {source['where']}" if source["where"] else "")
            row.cited[name] = row.cited.get(name, 0) + 1
    if evidence.get("verdict") in WARNED_VERDICTS:
        row.warned += 1
    if question.grounding == NONE_FOUND or evidence.get("verdict") == "replaced":
        row.declined += 1


def _count(row: ReportRow, fb: Feedback) -> None:
    if fb.rating == Feedback.Rating.UP:
        row.up += 1
    else:
        row.down += 1
        if fb.reason:
            row.reasons[fb.reason] = row.reasons.get(fb.reason, 0) + 1
    if row.last_at is None or fb.updated_at > row.last_at:
        row.last_at = fb.updated_at


def _unanswered(tenants: QuerySet[Tenant] | None) -> dict[Any, ReportRow]:
    """Questions the company's documents had nothing on (`grounding` "none_found")."""
    questions = (
        Message.objects.select_related("session__tenant")
        .filter(role=Message.Role.USER, grounding="none_found")
        .annotate(earlier=_earlier("session_id", "id"))
    )
    # Also the questions whose answer the product warned about (issue #31): the documents
    # did not hold what the reply stated. Counted per question; texts follow the same rules.
    warned = (
        Message.objects.select_related("session__tenant")
        .filter(
            role=Message.Role.USER,
            children__role=Message.Role.ASSISTANT,
            children__evidence__verdict__in=WARNED_VERDICTS,
        )
        .exclude(grounding="none_found")
        .annotate(earlier=_earlier("session_id", "id"))
        .distinct()
    )
    if tenants is not None:
        questions = questions.filter(session__tenant__in=tenants)
        warned = warned.filter(session__tenant__in=tenants)
    rows: dict[Any, ReportRow] = {}
    seen: list[tuple[Any, bool]] = [
        *((q, False) for q in questions.order_by("-id")[:REPORT_SCAN]),
        *((q, True) for q in warned.order_by("-id")[:REPORT_SCAN]),
    ]
    for question, was_warned in seen:
        key = normalize_question(question.content)
        tenant = question.session.tenant
        row = rows.setdefault((tenant.pk, key), ReportRow(tenant, key))
        if was_warned:
            row.warned += 1
        else:
            row.asked += 1
        if row.last_at is None or question.created_at > row.last_at:
            row.last_at = question.created_at
        if row._latest is None or question.id > row._latest.id:
            row._latest = question
        earlier = question.earlier
        row._first_only = row._first_only and not _follow_up(question, question.session, earlier)
    return rows


def answer_readable_by(
    *, user: AbstractBaseUser | AnonymousUser, tenant: Tenant, question_id: int
) -> bool:
    """Whether `user` may read every passage the question was given (an answer to it may rest
    on any of them): the group rule of knowledge.access applies to the feedback page too."""
    from knowledge.models import Passage
    from knowledge.services import passages_of

    groups = reader_for_user(user=user, tenant=tenant)
    given = Passage.objects.filter(message_id=question_id).count()
    if not given:
        return True
    readable = passages_of(message_ids=[question_id], reader=groups).get(question_id, [])
    return len(readable) == given


def _answer_readable(row: ReportRow, reader: AbstractBaseUser | AnonymousUser) -> bool:
    if row._latest is None:
        return True
    return answer_readable_by(user=reader, tenant=row.tenant, question_id=row._latest.id)


def _reveal_question(
    row: ReportRow,
    readable: set[int],
    candidates: dict[tuple[int, str], CachedReplyCandidate],
    min_count: int,
) -> list[Message]:
    """Set the row's question text if this reader may see it; the messages read, if any."""
    candidate = candidates.get((row.tenant.pk, row.key))
    if candidate is not None:
        row.cached_reply = candidate.promoted_to
    if row.tenant.pk in readable and row._latest is not None:
        row.question = row._latest.content
        return [row._latest]
    if candidate is not None and row._first_only:
        row.question = candidate.question  # the wording the candidates list shows
        return []
    row.hidden = HIDDEN_RARE.format(n=min_count) if row._first_only else HIDDEN_FOLLOW_UP
    return []


def _reveal_answer(
    row: ReportRow,
    readable: set[int],
    candidates: dict[tuple[int, str], CachedReplyCandidate],
) -> list[Message]:
    """Keep the best answer's text if this reader may see it (else None, with why)."""
    if row.tenant.pk in readable and row.reply_id is not None:
        reply = Message.objects.filter(id=row.reply_id).first()
        return [reply] if reply is not None else []
    if (row.tenant.pk, row.key) in candidates and not row._attached:
        return []
    row.answer = None
    row.hidden = (
        HIDDEN_ATTACHED
        if row._attached
        else row.hidden or HIDDEN_RARE.format(n=settings.QASSIST_CANDIDATE_MIN_COUNT)
    )
    return []


def _log_reads(reader: AbstractBaseUser | AnonymousUser, messages: list[Message]) -> None:
    """One content read per message whose text the page showed under the content audit."""
    if not messages or not isinstance(reader, AbstractBaseUser):
        return
    sessions = {
        s.id: s
        for s in ChatSession.objects.select_related("user", "api_key").filter(
            id__in={m.session_id for m in messages}
        )
    }
    ContentRead.objects.bulk_create(
        ContentRead(
            reader_id=reader.pk,
            reader_name=reader.get_username(),
            tenant_id=sessions[m.session_id].tenant_id,
            kind=ContentRead.Kind.MESSAGE,
            session_id=m.session_id,
            message_id=m.pk,
            owner_name=owner_name(sessions[m.session_id]),
        )
        for m in {m.pk: m for m in messages}.values()
        if m.session_id in sessions
    )


def feedback_promote(
    *,
    reader: AbstractBaseUser | AnonymousUser,
    tenants: QuerySet[Tenant] | None,
    reply_id: int,
    user: User | None,
) -> tuple[CachedReply, bool]:
    """A cached reply (disabled until reviewed) made from a well-rated answer to a first
    question, through the candidates' machinery (chat.cached_replies.candidate_promote), and
    whether it is new (False: the question had one already, which is returned). Only an answer
    the reader may see on the feedback page can be made one (a 404 otherwise)."""
    reply = (
        Message.objects.select_related("session__tenant", "parent")
        .filter(id=reply_id, role=Message.Role.ASSISTANT, parent__isnull=False)
        .annotate(earlier=_earlier("session_id", "parent_id"))
        .first()
    )
    if reply is None or reply.parent is None:
        raise Http404("No such answer.")
    if _follow_up(reply.parent, reply.session, reply.earlier):
        raise Http404("No such answer.")
    tenant = reply.session.tenant
    if tenants is not None and not tenants.filter(pk=tenant.pk).exists():
        raise Http404("No such answer.")
    key = normalize_question(reply.parent.content)
    readable = readable_tenants(user=reader).filter(pk=tenant.pk).exists()
    candidate = CachedReplyCandidate.objects.filter(tenant=tenant, normalized_key=key).first()
    common = candidate is not None and candidate.count >= settings.QASSIST_CANDIDATE_MIN_COUNT
    if not readable and (not common or _attached_sessions({reply.session_id})):
        raise Http404("No such answer.")
    if not Feedback.objects.filter(message=reply, rating=Feedback.Rating.UP).exists():
        raise Http404("No such answer.")
    if not answer_readable_by(user=reader, tenant=tenant, question_id=reply.parent.id):
        raise Http404("No such answer.")
    if candidate is None:  # counted before candidates were (or asked when the cache was off)
        candidate = CachedReplyCandidate.objects.create(
            tenant=tenant,
            normalized_key=key,
            question=reply.parent.content,
            count=1,
            last_answer=reply.content,
        )
    if candidate.promoted_to_id is not None:
        assert candidate.promoted_to is not None
        return candidate.promoted_to, False
    sources = message_data(reply).get("sources") or []
    promoted = candidate_promote(
        candidate=candidate, user=user, answer=reply.content, sources=sources
    )
    return promoted, True
