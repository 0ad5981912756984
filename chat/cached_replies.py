"""Business rules for curating cached replies: testing phrasings, learning candidates from
recurring first questions, drafting answers with the model, CSV import and export.

The lookup on the hot path is `chat.services.cached_reply_lookup`; the index behind it is
`chat.cache`, matching by the keys of `chat.question_keys`. Admin views and actions, and Celery
tasks, call these functions.
"""

from __future__ import annotations

import copy
import csv
import io
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chat.cache import cached_replies_changed
from chat.models import (
    CachedReply,
    CachedReplyCandidate,
    CachedReplyImport,
    key_taken_error,
    no_keys_error,
)
from chat.question_keys import normalize_question, reply_keys
from inference.types import ChatMessage, Delta, Done, Failed
from qassist.csv_cells import csv_writer, restore_cell
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


def candidate_promote(
    *, candidate: CachedReplyCandidate, user: User | None, answer: str | None = None
) -> CachedReply:
    """A cached reply made from the candidate, disabled until staff have read and enabled it:
    `answer` when given (a reply people rated well, feedback.services), else the reviewed draft
    if there is one, else the model's latest answer."""
    if candidate.promoted_to is not None:
        return candidate.promoted_to
    use_draft = candidate.draft_status == CachedReplyCandidate.DraftStatus.READY
    if answer is None:
        answer = candidate.draft_answer if use_draft else candidate.last_answer
    reply = CachedReply(
        tenant=candidate.tenant,
        question=candidate.question,
        answer=answer,
        enabled=False,
        created_by=user,
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
    from chat.services import default_sampling
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
    writer = csv_writer(out)  # formulas neutralised: qassist/csv_cells.py
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
    # Columns of the file not applied: the records of what happened to a reply (`hits`,
    # `last_hit_at`, `created_at`, `created_by`) are a superuser's to restore, not a tenant
    # admin's to set.
    ignored_columns: tuple[str, ...] = ()


# Columns only a superuser's import applies (tenants=None); a tenant admin's ignores them.
RECORD_COLUMNS = ("hits", "last_hit_at", "created_at", "created_by")
# Rows checked (and written) per step: progress is reported, and a write transaction lasts
# only this many rows, so that SQLite's one writer at a time is never held for long.
IMPORT_CHUNK_ROWS = 500
# Between two write transactions: waiting writers (a login, a completion) get the database.
IMPORT_CHUNK_PAUSE_SECONDS = 0.1
# Files with more rows run in the background (a Celery task), not in the admin's request.
IMPORT_INLINE_MAX_ROWS = 2_000

Progress = Callable[[str, int, int], None]  # (phase "checking" / "writing", done, total)


@dataclass
class _Row:
    """A checked row: the reply as it will be written, and the one it replaces (None: a new
    reply; one made by an earlier row of the file counts as existing, as it did when rows were
    saved one by one)."""

    reply: CachedReply
    replaces: CachedReply | None


@dataclass
class ImportPlan:
    """What an import will write, checked against the table and itself; nothing written yet."""

    replies: list[CachedReply]  # each reply once, as the last row touching it left it
    created: int
    updated: int
    ignored_columns: tuple[str, ...]


def cached_replies_import(
    *,
    text: str,
    tenants: QuerySet[Tenant] | None,
    user: User | None,
    progress: Progress | None = None,
) -> ImportResult:
    """Create or update cached replies from CSV `text` (the export's columns; `question` and
    `answer` required, others optional). A row updates the reply with the same tenant and
    question (after normalisation) and creates one otherwise. All or nothing for what is
    wrong with the file: every bad row is reported with its line number and no row is
    imported. `tenants`: the tenants the caller may import into (None: a superuser: any, and
    replies for every tenant; only a superuser's import applies the RECORD_COLUMNS).

    Linear in the rows: the file is checked in memory against an index of the table's keys
    built once (`cached_replies_import_check`), then written in short transactions of
    IMPORT_CHUNK_ROWS rows (`cached_replies_import_write`)."""
    plan = cached_replies_import_check(text=text, tenants=tenants, user=user, progress=progress)
    cached_replies_import_write(plan=plan, progress=progress)
    return ImportResult(plan.created, plan.updated, plan.ignored_columns)


def import_limits() -> tuple[int, int]:
    """(bytes, rows) a CSV import may have."""
    return (
        int(settings.QASSIST_CACHED_REPLY_IMPORT_MAX_MB) * 1024 * 1024,
        int(settings.QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS),
    )


def check_import_size(*, size: int) -> None:
    """Refuse a file over QASSIST_CACHED_REPLY_IMPORT_MAX_MB before it is read."""
    max_bytes, _ = import_limits()
    if size > max_bytes:
        raise CachedReplyImportError(
            [
                f"The file is {size / 2**20:,.1f} MB; an import may be at most "
                f"{max_bytes / 2**20:,.0f} MB (QASSIST_CACHED_REPLY_IMPORT_MAX_MB). "
                "Split it into smaller files and import them one after the other."
            ]
        )


def import_row_count(text: str) -> int:
    """Rows of a CSV file besides its header (cells may span lines); 0 if it cannot be read."""
    try:
        return max(0, sum(1 for _ in csv.reader(io.StringIO(text))) - 1)
    except csv.Error:
        return 0


def _read_rows(text: str) -> tuple[list[str], list[tuple[int, dict[str | None, Any]]]]:
    """The header and (line, row) of each row, at most QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS."""
    check_import_size(size=len(text.encode("utf-8", errors="replace")))
    _, max_rows = import_limits()
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = list(reader.fieldnames or [])
    missing = [name for name in ("question", "answer") if name not in header]
    unknown = [name for name in header if name not in CSV_COLUMNS]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing column(s) {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown column(s) {', '.join(unknown)}")
        raise CachedReplyImportError([f"line 1: {'; '.join(problems)}"])
    rows: list[tuple[int, dict[str | None, Any]]] = []
    line = reader.line_num + 1
    try:
        for row in reader:
            if len(rows) >= max_rows:
                raise CachedReplyImportError(
                    [
                        f"The file has more than {max_rows:,} rows, the most an import may "
                        "have (QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS). Split it into smaller "
                        "files and import them one after the other."
                    ]
                )
            rows.append((line, row))
            line = reader.line_num + 1
    except csv.Error as exc:
        raise CachedReplyImportError([f"line {line}: not readable as CSV ({exc})"]) from None
    return header, rows


class _KeyIndex:
    """Every key of every reply in the scopes a file touches, built once, kept up to date as
    rows are checked: what `CachedReply.clean` asks the table for each reply, in memory."""

    def __init__(self, scopes: set[int | None]) -> None:
        self.owner: dict[tuple[int | None, str], CachedReply] = {}
        self.by_question: dict[tuple[int | None, str], CachedReply] = {}
        self.keys: dict[int, list[str]] = {}  # id() of a reply -> its keys
        wanted = Q(tenant_id__in=[s for s in scopes if s is not None])
        if None in scopes:
            wanted |= Q(tenant__isnull=True)
        for reply in CachedReply.objects.filter(wanted).select_related("created_by"):
            self.add(reply, reply_keys(reply))

    def add(self, reply: CachedReply, keys: list[str]) -> None:
        for key in keys:
            self.owner.setdefault((reply.tenant_id, key), reply)
        self.keys[id(reply)] = keys
        if keys:
            self.by_question[(reply.tenant_id, normalize_question(reply.question))] = reply

    def replace(self, old: CachedReply | None, new: CachedReply, keys: list[str]) -> None:
        if old is not None:
            for key in self.keys.pop(id(old), []):
                if self.owner.get((old.tenant_id, key)) is old:
                    del self.owner[(old.tenant_id, key)]
        self.add(new, keys)

    def check(self, reply: CachedReply, keys: list[str], itself: CachedReply | None) -> None:
        """CachedReply.clean's rule, with its messages."""
        if not keys:
            raise no_keys_error()
        for key in sorted(keys):
            other = self.owner.get((reply.tenant_id, key))
            if other is not None and other is not itself:
                raise key_taken_error(key, other)


def cached_replies_import_check(
    *,
    text: str,
    tenants: QuerySet[Tenant] | None,
    user: User | None,
    progress: Progress | None = None,
) -> ImportPlan:
    """Check every row of the file without writing anything; raises CachedReplyImportError
    with every bad row, else returns what to write. Reads the table once."""
    header, rows = _read_rows(text)
    superuser = tenants is None
    ignored = () if superuser else tuple(c for c in RECORD_COLUMNS if c in header)
    allowed = {t.slug: t for t in (Tenant.objects.all() if tenants is None else tenants)}
    scopes: set[int | None] = set()
    for _, row in rows:
        slug = str(row.get("tenant") or "").strip()
        scopes.add(allowed[slug].pk if slug in allowed else None)
    index = _KeyIndex(scopes)
    users: dict[str, User] = {}
    if superuser and "created_by" in header:
        names = {str(row.get("created_by") or "").strip() for _, row in rows} - {""}
        users = {u.get_username(): u for u in User.objects.filter(username__in=names)}
    errors: list[str] = []
    created = updated = 0
    touched: dict[int, CachedReply] = {}  # id() of the original -> the reply to write
    for done, (line, row) in enumerate(rows, start=1):
        try:
            checked = _check_row(row, allowed, superuser, user, users, index)
        except ValidationError as error:
            errors.append(f"line {line}: {_messages(error)}")
        else:
            created += checked.replaces is None
            updated += checked.replaces is not None
            if checked.replaces is not None:
                touched.pop(id(checked.replaces), None)
            touched[id(checked.reply)] = checked.reply
        if progress is not None and (done % IMPORT_CHUNK_ROWS == 0 or done == len(rows)):
            progress("checking", done, len(rows))
    if errors:
        raise CachedReplyImportError(errors)
    return ImportPlan(list(touched.values()), created, updated, ignored)


def _check_row(
    row: dict[str | None, Any],
    allowed: dict[str, Tenant],
    superuser: bool,
    user: User | None,
    users: dict[str, User],
    index: _KeyIndex,
) -> _Row:
    if None in row:
        raise ValidationError("more cells than columns")
    # Cells as qassist exported them: the quote in front of a formula-like cell comes off.
    cells = {str(k): restore_cell(v) if isinstance(v, str) else "" for k, v in row.items()}
    slug = cells.get("tenant", "").strip()
    if slug:
        tenant = allowed.get(slug)
        if tenant is None:
            raise ValidationError({"tenant": [f"no tenant “{slug}” you may import into"]})
    elif not superuser:
        raise ValidationError({"tenant": ["required: replies for every tenant are superusers'"]})
    else:
        tenant = None
    question = cells.get("question", "")
    scope = tenant.pk if tenant is not None else None
    key = normalize_question(question)
    existing = index.by_question.get((scope, key)) if key else None
    # A copy: the indexed reply stays as it was if this row turns out wrong.
    reply = copy.copy(existing) if existing is not None else CachedReply(tenant=tenant)
    if existing is None:
        reply.created_by = user
    reply.question = question
    reply.answer = cells.get("answer", "")
    if "alternatives" in cells:
        reply.alternatives = cells["alternatives"]
    if "enabled" in cells:
        reply.enabled = _boolean(cells["enabled"], "enabled")
    if "expires_at" in cells:
        reply.expires_at = _datetime(cells["expires_at"], "expires_at")
    if superuser:
        _restore_records(reply, cells, users)
    reply.clean_fields(exclude=["tenant", "created_by"])  # both resolved above
    keys = reply_keys(reply)
    index.check(reply, keys, existing)
    index.replace(existing, reply, keys)
    return _Row(reply=reply, replaces=existing)


def _messages(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
    return " ".join(error.messages)


def _restore_records(reply: CachedReply, cells: dict[str, str], users: dict[str, User]) -> None:
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
        reply.created_by = users.get(cells["created_by"].strip(), reply.created_by)


_WRITTEN_FIELDS = [
    "question",
    "normalized_key",
    "alternatives",
    "answer",
    "enabled",
    "expires_at",
    "hits",
    "last_hit_at",
    "created_at",
    "created_by",
    "updated_at",
]


def cached_replies_import_write(*, plan: ImportPlan, progress: Progress | None = None) -> None:
    """Write a checked plan in transactions of IMPORT_CHUNK_ROWS replies, with a pause
    between them for other writers. A chunk refused by the database (someone changed the same
    replies in the admin meanwhile) stops the import there: the chunks before it stay written,
    and importing the same file again completes it (a row updates the reply with its
    question)."""
    now = timezone.now()
    total = len(plan.replies)
    try:
        for start in range(0, total, IMPORT_CHUNK_ROWS):
            chunk = plan.replies[start : start + IMPORT_CHUNK_ROWS]
            for reply in chunk:
                reply.normalized_key = normalize_question(reply.question)  # as save() does
                reply.updated_at = now
            new = [r for r in chunk if r.pk is None]
            old = [r for r in chunk if r.pk is not None]
            with transaction.atomic():
                CachedReply.objects.bulk_create(new)
                for reply in old:
                    # One short UPDATE by primary key each: bulk_update's CASE over 500 rows
                    # and 11 columns took SQLite seconds per chunk, holding its write lock.
                    CachedReply.objects.filter(pk=reply.pk).update(
                        **{f: getattr(reply, f) for f in _WRITTEN_FIELDS}
                    )
            if progress is not None:
                progress("writing", start + len(chunk), total)
            if start + IMPORT_CHUNK_ROWS < total and connection.vendor == "sqlite":
                # SQLite has one writer at a time: a login or a reply waiting for the lock
                # retries every few ms up to 100 ms; the gap lets it in.
                time.sleep(IMPORT_CHUNK_PAUSE_SECONDS)
    finally:
        if total:
            cached_replies_changed()  # bulk writes send no signals: tell every process


# --- large imports in the background ----------------------------------------------------------

MAX_STORED_ERRORS = 500  # a refused file lists this many of its bad rows, and how many more
PROGRESS_EVERY_SECONDS = 0.5


def cached_reply_import_create(
    *, text: str, user: User | None, file_name: str = ""
) -> CachedReplyImport:
    """Keep the file for a background import, started once the transaction commits."""
    job = CachedReplyImport.objects.create(text=text, created_by=user, file_name=file_name[:255])
    cached_reply_import_dispatch(import_id=job.pk)
    return job


def cached_reply_import_dispatch(*, import_id: uuid.UUID) -> None:
    """Start the import on a Celery worker (in both modes: it needs no model, and a worker
    process keeps its CPU work off the web process) once the transaction commits. A broker
    that is away leaves it queued: beat sends it again (`cached_reply_imports_resume`)."""
    transaction.on_commit(lambda: _send_import(import_id))


def _send_import(import_id: uuid.UUID) -> None:
    from chat.tasks import import_cached_replies

    try:
        import_cached_replies.delay(str(import_id))
    except Exception as exc:  # the broker is away: the file stands, beat sends it later
        logger.warning("could not queue cached reply import %s: %s", import_id, exc)


RESEND_AFTER_SECONDS = 60


def cached_reply_imports_resume(*, now: datetime | None = None) -> int:
    """Imports still queued a minute after they were made (their message lost, or never sent)
    are sent again; one that is already running ignores the second message."""
    since = (now or timezone.now()) - timedelta(seconds=RESEND_AFTER_SECONDS)
    waiting = list(
        CachedReplyImport.objects.filter(
            status=CachedReplyImport.Status.QUEUED, created_at__lt=since
        ).values_list("id", flat=True)
    )
    for import_id in waiting:
        _send_import(import_id)
    return len(waiting)


def cached_reply_import_tenants(*, user: User) -> QuerySet[Tenant] | None:
    """The tenants `user` may import into now (None: a superuser, any); as the admin's."""
    if user.is_active and user.is_superuser:
        return None
    from tenants.services import tenants_administered_by

    if not (user.is_active and user.is_staff):
        return Tenant.objects.none()
    return tenants_administered_by(user=user)


def cached_reply_import_run(*, import_id: uuid.UUID | str) -> CachedReplyImport:
    """Run a queued import (the Celery task): check every row, then write in chunks, keeping
    its progress on the record for the admin's page. Runs once: a record already taken by
    another worker is left alone."""
    claimed = CachedReplyImport.objects.filter(
        pk=import_id, status=CachedReplyImport.Status.QUEUED
    ).update(status=CachedReplyImport.Status.CHECKING, started_at=timezone.now())
    job = CachedReplyImport.objects.select_related("created_by").get(pk=import_id)
    if not claimed:
        return job
    reported = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        job.status, job.rows_done, job.rows_total = phase, done, total
        if phase == "writing":
            job.written = done
        now = time.monotonic()
        if done < total and now - reported[0] < PROGRESS_EVERY_SECONDS:
            return
        reported[0] = now
        CachedReplyImport.objects.filter(pk=job.pk).update(
            status=phase, rows_done=done, rows_total=total, written=job.written
        )

    try:
        if job.created_by is None:
            raise CachedReplyImportError(["The account that started this import was deleted."])
        result = cached_replies_import(
            text=job.text,
            tenants=cached_reply_import_tenants(user=job.created_by),
            user=job.created_by,
            progress=progress,
        )
    except CachedReplyImportError as error:
        _finish(job, errors=error.errors)
    except Exception as exc:  # shown to staff; a crash must not leave "writing" forever
        logger.exception("cached reply import %s failed", job.pk)
        _finish(
            job,
            errors=[
                f"The import stopped after writing {job.written} replies: "
                f"{type(exc).__name__}: {exc}. Importing the same file again completes it "
                "(a row updates the reply with its question)."
            ],
        )
    else:
        job.created, job.updated = result.created, result.updated
        job.ignored_columns = list(result.ignored_columns)
        _finish(job, errors=[])
    return job


def _finish(job: CachedReplyImport, *, errors: list[str]) -> None:
    job.status = CachedReplyImport.Status.FAILED if errors else CachedReplyImport.Status.DONE
    job.errors = errors[:MAX_STORED_ERRORS]
    job.error_count = len(errors)
    job.text = ""  # the file is not kept once it was imported or refused
    job.finished_at = timezone.now()
    job.rows_done = job.rows_total if not errors else job.rows_done
    job.save()


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
