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
from knowledge.models import Chunk, Document, DocumentFile, KnowledgeBase, Passage
from knowledge.prompt import PassageText
from tenants.models import ApiKey, Tenant

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
) -> Document:
    """Store a checked file as a queued document; indexing starts when the transaction commits.
    `session_id`: attached to that conversation (the caller checked it is the user's own)."""
    filename = PurePath(upload.filename.replace("\\", "/")).name[:MAX_FILENAME]
    kind = check_upload(filename=filename, data=upload.data)
    digest = hashlib.sha256(upload.data).hexdigest()
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
        )
        DocumentFile.objects.create(document=document, data=upload.data)
        _dispatch(document)
    return document


def document_replace(
    *, document: Document, upload: Upload, title: str = "", user: User | None = None
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


def tenant_documents(*, tenant: Tenant) -> QuerySet[Document]:
    """The tenant's knowledge base (attachments to conversations are not in it)."""
    return Document.objects.filter(tenant=tenant, session__isnull=True).order_by("-created_at")


def tenant_document_get(*, tenant: Tenant, document_id: str) -> Document:
    """One of the tenant's knowledge-base documents by its public id ("doc-…"); anything else
    is a 404."""
    raw = document_id.removeprefix("doc-")
    try:
        pk = uuid.UUID(raw)
    except ValueError:
        raise Http404("No such document.") from None
    document = Document.objects.filter(pk=pk, tenant=tenant, session__isnull=True).first()
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
    tenant, with its document; anything else is a 404, never a 403 (no existence leak)."""
    if not user.is_active:
        raise Http404("No such passage.")
    chunk = (
        Chunk.objects.select_related("document")
        .filter(_visible_to(user, tenant), pk=passage_id)
        .first()
    )
    if chunk is None:
        raise Http404("No such passage.")
    return chunk


def document_for_user(*, user: User, tenant: Tenant, document_id: uuid.UUID) -> Document:
    """A document `user` may open (download) in `tenant`, by the rule of `passage_for_user`."""
    visible = Document.objects.filter(pk=document_id).filter(
        Q(tenant=tenant, tenant__active=True, tenant__memberships__user=user)
        & (Q(session__isnull=True) | Q(session__user=user))
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


def knowledge_summary(*, tenant: Tenant) -> dict[str, object]:
    """What the chat page says about company knowledge: whether questions search documents
    here (and files can be attached), and how many of the tenant's documents are ready."""
    on = mode(tenant=tenant) != KnowledgeBase.Mode.OFF
    ready = (
        Document.objects.filter(
            tenant=tenant, session__isnull=True, status=Document.Status.READY
        ).count()
        if on
        else 0
    )
    return {"on": on, "documents": ready}


# --- what a question is given ------------------------------------------------------------------


def searchable(*, tenant: Tenant, session_id: object) -> bool:
    """Whether questions in this scope are to search documents: the tenant's knowledge is on
    and it, or the conversation, has passages: a ready document's, or those of the previous
    version of one being indexed again (they answer until the new version is ready)."""
    kb = KnowledgeBase.objects.filter(tenant=tenant).first()
    if kb is not None and kb.mode == KnowledgeBase.Mode.OFF:
        return False
    scope = Q(session__isnull=True)
    if session_id is not None:
        scope |= Q(session_id=session_id)
    return Chunk.objects.filter(scope, tenant=tenant).exists()


def mode(*, tenant: Tenant) -> str:
    kb = KnowledgeBase.objects.filter(tenant=tenant).first()
    return kb.mode if kb is not None else KnowledgeBase.Mode.FIRST


def passages_of(*, message_ids: Iterable[int]) -> dict[int, list[Passage]]:
    """Each message's passages, numbered order (with their chunks, for the text)."""
    out: dict[int, list[Passage]] = {}
    for passage in Passage.objects.filter(message_id__in=list(message_ids)).select_related("chunk"):
        out.setdefault(passage.message_id, []).append(passage)
    return out


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
