"""Cached replies in and out of CSV: the export (formula-safe cells), the import (checked in
memory against an index of the table built with one query, then written in chunks that leave
the database to other writers between them), and large imports on the Celery worker with their
progress. Review #21 measured it: docs/BENCHMARKS.md "A cached-reply CSV import while people
log in"."""

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

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chat.cache import cached_replies_changed
from chat.models import (
    CachedReply,
    CachedReplyImport,
    key_taken_error,
    no_keys_error,
)
from chat.question_keys import normalize_question, reply_keys
from qassist.csv_cells import csv_writer, restore_cell
from tenants.models import Tenant

logger = logging.getLogger(__name__)

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
