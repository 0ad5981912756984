"""Business rules for documents: upload, replace, delete, list; what a question is given.

The admin, the REST API, the chat (attachments) and the Celery task call these. Files are
checked (size, type against extension, limits, duplicates by checksum) before anything is
stored; indexing runs in Celery once the upload's transaction commits (`knowledge.tasks`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, F, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from knowledge import parsers
from knowledge.access import (
    ALL,
    PUBLIC,
    Reader,
    audience_filter,
    audience_key,
    may_read_passage,
    reader_for_user,
)
from knowledge.models import Chunk, Document, DocumentFile, KnowledgeBase, Passage
from knowledge.prompt import PassageText
from tenants.models import ApiKey, Tenant, TenantGroup

MAX_FILENAME = 255


class KnowledgeError(Exception):
    """An upload or request refused; `code` and the message go to the person as they are."""

    def __init__(self, code: str, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


# --- checks ----------------------------------------------------------------------------------


def _human_mb(size: int) -> str:
    return f"{size / (1024 * 1024):,.1f} MB"


def human_size(size: int) -> str:
    """Bytes for people: "812 bytes", "15.9 KB", "12.3 MB"."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:,.1f} KB"
    return _human_mb(size)


def check_file_size(size: int) -> None:
    limit = int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024
    if size > limit:
        raise KnowledgeError(
            "file_too_large",
            f"The file is {_human_mb(size)}; one file may be at most {_human_mb(limit)}.",
            status=413,
        )


def check_upload(*, filename: str, data: bytes) -> str:
    """The format the file will be read as; KnowledgeError saying why it is refused."""
    name = PurePath(filename.replace("\\", "/")).name.strip()
    if not name:
        raise KnowledgeError("invalid_file", "The file has no name.")
    check_file_size(len(data))
    try:
        return parsers.detect(data, name)
    except parsers.ParseError as exc:
        raise KnowledgeError("unsupported_file", str(exc), status=415) from None


def knowledge_base(*, tenant: Tenant) -> KnowledgeBase:
    kb, _ = KnowledgeBase.objects.get_or_create(tenant=tenant)
    return kb


def _storage_used(tenant: Tenant, *, excluding: Document | None = None) -> int:
    documents = Document.objects.filter(tenant=tenant, session__isnull=True)
    if excluding is not None:
        documents = documents.exclude(pk=excluding.pk)
    return int(documents.aggregate(total=Sum("size"))["total"] or 0)


def _attachments_used(user: User, *, excluding: Document | None = None) -> int:
    documents = Document.objects.filter(uploaded_by=user, session__isnull=False)
    if excluding is not None:
        documents = documents.exclude(pk=excluding.pk)
    return int(documents.aggregate(total=Sum("size"))["total"] or 0)


def _check_room(
    *, tenant: Tenant, session_id: object, user: User | None, size: int, replacing: Document | None
) -> None:
    if session_id is None:
        limit = knowledge_base(tenant=tenant).storage_limit_bytes
        used = _storage_used(tenant, excluding=replacing)
        if used + size > limit:
            raise KnowledgeError(
                "storage_limit",
                f"{tenant} has {_human_mb(used)} of documents; with this file it would exceed "
                f"its limit of {_human_mb(limit)}. Delete documents or ask staff to raise it.",
                status=413,
            )
        return
    assert user is not None
    limit = int(settings.QASSIST_ATTACHMENTS_MAX_MB) * 1024 * 1024
    used = _attachments_used(user, excluding=replacing)
    if used + size > limit:
        raise KnowledgeError(
            "attachment_limit",
            f"Your attached files take {_human_mb(used)}; with this one they would exceed "
            f"{_human_mb(limit)}. Delete conversations with attachments you no longer need.",
            status=413,
        )


@dataclass(frozen=True)
class KnowledgeUsage:
    """A tenant's knowledge base at a glance: storage used against its limit, documents by
    status."""

    used: int  # bytes
    limit: int  # bytes
    by_status: dict[str, int]

    @property
    def documents(self) -> int:
        return sum(self.by_status.values())

    @property
    def storage_text(self) -> str:
        """For example "15.9 KB of 500.0 MB (0%)"."""
        share = f" ({self.used / self.limit:.0%})" if self.limit else ""
        return f"{human_size(self.used)} of {human_size(self.limit)}{share}"

    @property
    def documents_text(self) -> str:
        """For example "3 document(s): 2 ready, 1 failed"."""
        if not self.documents:
            return "No documents"
        parts = [
            f"{self.by_status[status]} {label.lower()}"
            for status, label in Document.Status.choices
            if self.by_status.get(status)
        ]
        return f"{self.documents} document(s): {', '.join(parts)}"


def knowledge_usage(*, tenant_ids: Iterable[int]) -> dict[int, KnowledgeUsage]:
    """Each tenant's knowledge base (attachments to conversations are not in it) at a glance,
    in two queries however many tenants."""
    ids = list(tenant_ids)
    default = int(settings.QASSIST_KNOWLEDGE_STORAGE_MB) * 1024 * 1024
    limits = {
        kb.tenant_id: kb.storage_limit_bytes
        for kb in KnowledgeBase.objects.filter(tenant_id__in=ids)
    }
    used: dict[int, int] = dict.fromkeys(ids, 0)
    by_status: dict[int, dict[str, int]] = {tenant_id: {} for tenant_id in ids}
    rows = (
        Document.objects.filter(tenant_id__in=ids, session__isnull=True)
        .values("tenant_id", "status")
        .annotate(n=Count("id"), size=Sum("size"))
        .order_by()
    )
    for row in rows:
        used[row["tenant_id"]] += int(row["size"] or 0)
        by_status[row["tenant_id"]][row["status"]] = int(row["n"])
    return {
        tenant_id: KnowledgeUsage(
            used=used[tenant_id],
            limit=limits.get(tenant_id, default),
            by_status=by_status[tenant_id],
        )
        for tenant_id in ids
    }


def title_from_filename(filename: str) -> str:
    stem = PurePath(filename).stem.replace("_", " ").replace("-", " ").strip()
    return " ".join(stem.split())[:300] or filename[:300]


# --- documents -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    filename: str
    data: bytes


def document_upload(
    *,
    tenant: Tenant,
    upload: Upload,
    title: str = "",
    uploaded_by: User | None = None,
    api_key: ApiKey | None = None,
    session_id: uuid.UUID | None = None,
    groups: Sequence[TenantGroup] | None = None,
    origin: str = "",
) -> Document:
    """Store a checked file as a queued document; indexing starts when the transaction commits.
    `session_id`: attached to that conversation (the caller checked it is the user's own).
    `groups`: only their members may read it (None: everyone in the tenant; an empty list:
    nobody until groups are chosen). `origin`: where a synced document lives."""
    filename = PurePath(upload.filename.replace("\\", "/")).name[:MAX_FILENAME]
    kind = check_upload(filename=filename, data=upload.data)
    digest = hashlib.sha256(upload.data).hexdigest()
    if groups is not None:
        check_groups(tenant=tenant, groups=groups)
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()  # one upload at a time
        same = Document.objects.filter(tenant=tenant, session_id=session_id, sha256=digest).first()
        if same is not None:
            raise KnowledgeError(
                "duplicate_document",
                f"This file is already uploaded as “{same}” ({same.public_id}).",
                status=409,
            )
        _check_room(
            tenant=tenant,
            session_id=session_id,
            user=uploaded_by,
            size=len(upload.data),
            replacing=None,
        )
        document = Document.objects.create(
            tenant=tenant,
            session_id=session_id,
            title=(title.strip() or title_from_filename(filename))[:300],
            filename=filename,
            kind=kind,
            size=len(upload.data),
            sha256=digest,
            uploaded_by=uploaded_by,
            api_key=api_key,
            origin=origin[:2000],
            audience=audience_key(
                [g.pk for g in groups or []], limited=groups is not None and session_id is None
            ),
        )
        if groups and session_id is None:
            document.groups.set(groups)
        DocumentFile.objects.create(document=document, data=upload.data)
        _dispatch(document)
    return document


def document_replace(
    *,
    document: Document,
    upload: Upload,
    title: str = "",
    user: User | None = None,
    origin: str | None = None,
) -> Document:
    """A new version of the document: stored now, indexed in the background; until then the
    previous version's passages keep answering."""
    filename = PurePath(upload.filename.replace("\\", "/")).name[:MAX_FILENAME]
    kind = check_upload(filename=filename, data=upload.data)
    with transaction.atomic():
        document = Document.objects.select_for_update().get(pk=document.pk)
        _check_room(
            tenant=document.tenant,
            session_id=document.session_id,
            user=user or document.uploaded_by,
            size=len(upload.data),
            replacing=document,
        )
        document.version += 1
        document.filename = filename
        document.kind = kind
        document.size = len(upload.data)
        document.sha256 = hashlib.sha256(upload.data).hexdigest()
        if title.strip():
            document.title = title.strip()[:300]
        if origin is not None:
            document.origin = origin[:2000]
        document.status = Document.Status.QUEUED
        document.error = ""
        document.progress = 0
        document.updated_at = timezone.now()
        document.save()
        DocumentFile.objects.update_or_create(document=document, defaults={"data": upload.data})
        _dispatch(document)
    return document


def document_delete(*, document: Document) -> None:
    """Delete a document with its file, passages, vectors and index entries. Conversations that
    quoted it keep their sources' titles; their text is gone."""
    with transaction.atomic():
        tenant_id = document.tenant_id
        document.delete()
        index_changed(tenant_id=tenant_id)


def document_reindex(*, document: Document) -> Document:
    """Index the current version again (after a failure, or a new embedding model)."""
    with transaction.atomic():
        Document.objects.filter(pk=document.pk).update(
            status=Document.Status.QUEUED, error="", progress=0, updated_at=timezone.now()
        )
        document.refresh_from_db()
        _dispatch(document)
    return document


def check_groups(*, tenant: Tenant, groups: Iterable[TenantGroup]) -> list[TenantGroup]:
    """`groups` if every one is the tenant's own; KnowledgeError naming the first that is not."""
    chosen = list(groups)
    for group in chosen:
        if group.tenant_id != tenant.pk:
            raise KnowledgeError("invalid_group", f"“{group}” is not a group of {tenant}.")
    return chosen


def groups_by_name(*, tenant: Tenant, names: Iterable[str]) -> list[TenantGroup]:
    """The tenant's groups named `names` (REST); KnowledgeError naming one it does not have."""
    wanted = [n.strip() for n in names if n.strip()]
    found = {g.name: g for g in TenantGroup.objects.filter(tenant=tenant, name__in=wanted)}
    for name in wanted:
        if name not in found:
            raise KnowledgeError("invalid_group", f"{tenant} has no group named “{name}”.")
    return [found[n] for n in dict.fromkeys(wanted)]


def document_set_groups(*, document: Document, groups: Sequence[TenantGroup] | None) -> Document:
    """Who may read the document from now on: the members of `groups` (an empty list: nobody
    but staff in the admin), or everyone in the tenant (None). Its passages follow at once,
    without indexing it again; a conversation's attachment stays its owner's."""
    if document.session_id is not None:
        raise KnowledgeError("invalid_group", "A file attached to a conversation is its owner's.")
    if groups is not None:
        check_groups(tenant=document.tenant, groups=groups)
    audience = audience_key([g.pk for g in groups or []], limited=groups is not None)
    with transaction.atomic():
        # The row lock orders this with indexing's final write (knowledge.ingest._store),
        # which copies the audience to the passages it writes.
        locked = Document.objects.select_for_update().get(pk=document.pk)
        locked.groups.set(groups or [])
        if locked.audience != audience:
            Document.objects.filter(pk=locked.pk).update(audience=audience)
            Chunk.objects.filter(document=locked).update(audience=audience)
            index_changed(tenant_id=locked.tenant_id)
    document.refresh_from_db()
    return document


def documents_audience_refresh(*, document_ids: Iterable[uuid.UUID]) -> int:
    """Recompute the audience of documents whose groups changed behind their back (a group
    deleted): one limited to groups that are all gone is read by nobody until staff choose
    again, never by everyone. How many changed."""
    changed = 0
    for document in Document.objects.filter(pk__in=list(document_ids)):
        ids = list(document.groups.values_list("id", flat=True))
        audience = audience_key(ids, limited=bool(document.audience))
        if audience != document.audience:
            with transaction.atomic():
                Document.objects.filter(pk=document.pk).update(audience=audience)
                Chunk.objects.filter(document=document).update(audience=audience)
                index_changed(tenant_id=document.tenant_id)
            changed += 1
    return changed


def documents_stale(*, embedder: str, tenant: Tenant | None = None) -> QuerySet[Document]:
    """Documents (attachments too) with passages another embedding model embedded: their
    vectors mean nothing to questions embedded by `embedder`."""
    stale = Chunk.objects.exclude(embedder=embedder).values("document_id")
    documents = Document.objects.filter(pk__in=stale)
    return documents.filter(tenant=tenant) if tenant is not None else documents


def documents_reindex(*, documents: QuerySet[Document]) -> int:
    """Queue each of `documents` to be indexed again; how many were."""
    count = 0
    for document in documents.order_by("created_at"):
        document_reindex(document=document)
        count += 1
    return count


def _dispatch(document: Document) -> None:
    from knowledge.tasks import index_dispatch

    index_dispatch(document_id=document.pk, version=document.version)


def index_changed(*, tenant_id: int) -> None:
    """The tenant's searchable passages changed: processes holding its vectors reload them."""
    updated = KnowledgeBase.objects.filter(tenant_id=tenant_id).update(
        index_version=F("index_version") + 1
    )
    if not updated:
        KnowledgeBase.objects.get_or_create(tenant_id=tenant_id)
        KnowledgeBase.objects.filter(tenant_id=tenant_id).update(
            index_version=F("index_version") + 1
        )


def tenant_documents(*, tenant: Tenant, reader: Reader = ALL) -> QuerySet[Document]:
    """The tenant's knowledge base (attachments to conversations are not in it), the documents
    `reader` may read."""
    return (
        Document.objects.filter(tenant=tenant, session__isnull=True)
        .filter(audience_filter(tenant_id=tenant.pk, reader=reader))
        .order_by("-created_at")
    )


def tenant_document_get(*, tenant: Tenant, document_id: str, reader: Reader = ALL) -> Document:
    """One of the tenant's knowledge-base documents `reader` may read, by its public id
    ("doc-…"); anything else is a 404."""
    raw = document_id.removeprefix("doc-")
    try:
        pk = uuid.UUID(raw)
    except ValueError:
        raise Http404("No such document.") from None
    document = tenant_documents(tenant=tenant, reader=reader).filter(pk=pk).first()
    if document is None:
        raise Http404("No such document.")
    return document


def document_data(*, document: Document) -> bytes:
    file = DocumentFile.objects.filter(document=document).first()
    return bytes(file.data) if file is not None else b""


# --- what people in the chat may open ---------------------------------------------------------


def _visible_to(user: User, tenant: Tenant) -> Q:
    """Documents `user` may open in `tenant`: while an active member of it (an active tenant),
    the tenant's knowledge base and the documents attached to their own conversations. A
    colleague's attachment is as invisible as another tenant's document."""
    member = Q(
        document__tenant=tenant,
        document__tenant__active=True,
        document__tenant__memberships__user=user,
    )
    return member & (Q(document__session__isnull=True) | Q(document__session__user=user))


def passage_for_user(*, user: User, tenant: Tenant, passage_id: int) -> Chunk:
    """A passage (a chunk, as sources name it) `user` may read in `tenant`, their current
    tenant, with its document: not one of a document limited to groups they are not in.
    Anything else is a 404, never a 403 (no existence leak)."""
    if not user.is_active:
        raise Http404("No such passage.")
    reader = reader_for_user(user=user, tenant=tenant)
    chunk = (
        Chunk.objects.select_related("document")
        .filter(_visible_to(user, tenant), pk=passage_id)
        .filter(audience_filter(tenant_id=tenant.pk, reader=reader, field="document__audience"))
        .first()
    )
    if chunk is None:
        raise Http404("No such passage.")
    return chunk


def document_for_user(*, user: User, tenant: Tenant, document_id: uuid.UUID) -> Document:
    """A document `user` may open (download) in `tenant`, by the rule of `passage_for_user`."""
    reader = reader_for_user(user=user, tenant=tenant)
    visible = (
        Document.objects.filter(pk=document_id)
        .filter(
            Q(tenant=tenant, tenant__active=True, tenant__memberships__user=user)
            & (Q(session__isnull=True) | Q(session__user=user))
        )
        .filter(audience_filter(tenant_id=tenant.pk, reader=reader))
    )
    document = visible.first() if user.is_active else None
    if document is None:
        raise Http404("No such document.")
    return document


def attachment_for_owner(*, user: User, tenant: Tenant, document_id: uuid.UUID) -> Document:
    """A document attached to one of `user`'s live conversations in `tenant`: what its owner
    may remove. The tenant's own documents, a colleague's attachment, or one of an archived
    conversation (read-only) is a 404."""
    document = (
        Document.objects.filter(
            pk=document_id,
            tenant=tenant,
            tenant__active=True,
            tenant__memberships__user=user,
            session__user=user,
            session__archived=False,
        )
        .select_related("session")
        .first()
    )
    if document is None or not user.is_active:
        raise Http404("No such document.")
    return document


def session_attachments(*, session_id: uuid.UUID) -> list[Document]:
    """The documents attached to a conversation (its owner checked by the caller), oldest
    first: the order they were attached in."""
    return list(Document.objects.filter(session_id=session_id).order_by("created_at"))


def attachment_upload(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, upload: Upload
) -> Document:
    """Attach a file to the user's conversation `session_id` (the caller checked it is theirs,
    live, in `tenant`): checked and stored like any upload, indexed in the background, read
    only in that conversation."""
    if knowledge_base(tenant=tenant).mode == KnowledgeBase.Mode.OFF:
        raise KnowledgeError(
            "knowledge_off",
            f"Documents are turned off in {tenant}: an attached file would not be read.",
            status=409,
        )
    return document_upload(tenant=tenant, upload=upload, uploaded_by=user, session_id=session_id)


def knowledge_summary(*, tenant: Tenant, reader: Reader = PUBLIC) -> dict[str, object]:
    """What the chat page says about company knowledge: whether questions search documents
    here (and files can be attached), and how many of the tenant's documents `reader` may read
    are ready."""
    on = mode(tenant=tenant) != KnowledgeBase.Mode.OFF
    ready = (
        Document.objects.filter(tenant=tenant, session__isnull=True, status=Document.Status.READY)
        .filter(audience_filter(tenant_id=tenant.pk, reader=reader))
        .count()
        if on
        else 0
    )
    return {"on": on, "documents": ready}


# --- what a question is given ------------------------------------------------------------------


def searchable(*, tenant: Tenant, session_id: object, reader: Reader = PUBLIC) -> bool:
    """Whether questions in this scope are to search documents: the tenant's knowledge is on
    and it, or the conversation, has passages `reader` may read: a ready document's, or those
    of the previous version of one being indexed again (they answer until the new version is
    ready)."""
    kb = KnowledgeBase.objects.filter(tenant=tenant).first()
    if kb is not None and kb.mode == KnowledgeBase.Mode.OFF:
        return False
    scope = Q(session__isnull=True)
    if session_id is not None:
        scope |= Q(session_id=session_id)
    readable = audience_filter(tenant_id=tenant.pk, reader=reader)
    return Chunk.objects.filter(scope, tenant=tenant).filter(readable).exists()


def mode(*, tenant: Tenant) -> str:
    kb = KnowledgeBase.objects.filter(tenant=tenant).first()
    return kb.mode if kb is not None else KnowledgeBase.Mode.FIRST


def passages_of(*, message_ids: Iterable[int], reader: Reader = PUBLIC) -> dict[int, list[Passage]]:
    """Each message's passages `reader` may read, numbered order (with their chunks, for the
    text): one of a document they may not read (any more) is left out, title and all."""
    out: dict[int, list[Passage]] = {}
    rows = Passage.objects.filter(message_id__in=list(message_ids)).select_related(
        "chunk", "document"
    )
    for passage in readable_passages(list(rows), reader=reader):
        out.setdefault(passage.message_id, []).append(passage)
    return out


def readable_passages(passages: Sequence[Passage], *, reader: Reader) -> list[Passage]:
    """The passages of `passages` that `reader` may read (knowledge.access.may_read_passage)."""
    if reader.reads_everything:
        return list(passages)
    return [p for p in passages if may_read_passage(reader, p)]


def passage_texts(
    passages: Sequence[Passage], *, introduced_only: bool = True
) -> list[PassageText]:
    return [
        PassageText(p.number, p.title, p.where, p.chunk.text if p.chunk is not None else None)
        for p in passages
        if p.introduced or not introduced_only
    ]


def chunks_text(chunk_ids: Iterable[int]) -> dict[int, Chunk]:
    return Chunk.objects.select_related("document").in_bulk(list(chunk_ids))


_CONTENT_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/plain; charset=utf-8",  # shown as text, never rendered as a page of ours
    "markdown": "text/markdown; charset=utf-8",
    "text": "text/plain",
}


def content_type(kind: str) -> str:
    return _CONTENT_TYPES.get(kind, "application/octet-stream")


def content_disposition(filename: str) -> str:
    """An attachment header for any file name (RFC 6266: ASCII fallback, UTF-8 name)."""
    from urllib.parse import quote

    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename)}"
