"""REST for a tenant's knowledge base, with the tenant's API keys (docs/api.md):

    GET    /v1/knowledge/documents                 the documents, and the storage used
    POST   /v1/knowledge/documents                 multipart: file (title, groups): upload (202)
    GET    /v1/knowledge/documents/{id}            one document: status, progress, error
    PUT    /v1/knowledge/documents/{id}            multipart: file (and title): a new version
    PATCH  /v1/knowledge/documents/{id}            JSON {"groups": [...] | null}: who may read it
    DELETE /v1/knowledge/documents/{id}            the document with its passages and vectors
    GET    /v1/knowledge/documents/{id}/content    the file as uploaded

Another tenant's document, a conversation's attachment, or a document limited to groups the
key's scope does not cover (knowledge.access) is a 404 like one that does not exist. A key
limited to groups may limit documents only to groups it covers. Indexing runs in the
background: a document is `queued`, then `indexing` (with `progress`), then `ready` or
`failed` (with `error`).
"""

from __future__ import annotations

from typing import Any, Literal

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.http.response import HttpResponseBase
from pydantic import BaseModel, Field

from chat.api.endpoint import ApiError, _principal, api_endpoint
from knowledge import services
from knowledge.access import Reader, reader_for_principal
from knowledge.models import Document
from qassist.json_input import JsonInputError, parse_json
from tenants.models import TenantGroup
from tenants.services import Principal

MULTIPART_SLACK = 1024 * 1024  # the form's own bytes around the file
MAX_PATCH_BYTES = 64 * 1024


class DocumentObject(BaseModel):
    id: str = Field(description="doc-…")
    object: Literal["knowledge.document"]
    title: str
    filename: str
    format: str = Field(description="What the file was read as: pdf, docx, html, markdown, text.")
    bytes: int
    sha256: str
    version: int = Field(description="Raised by each replacement.")
    status: Literal["queued", "indexing", "ready", "failed"]
    progress: int = Field(description="Percent indexed.")
    error: str | None = Field(description="Why indexing failed, in words a person acts on.")
    pages: int
    passages: int = Field(description="Passages retrieval can find.")
    created_at: int
    updated_at: int
    indexed_at: int | None
    groups: list[str] | None = Field(
        description="The groups whose members may read it; null: everyone in the tenant."
    )
    origin: str | None = Field(
        description="Where a synced document lives (a page's URL, a file's path); else null."
    )


class Storage(BaseModel):
    used_bytes: int
    limit_bytes: int


class DocumentList(BaseModel):
    object: Literal["list"]
    data: list[DocumentObject]
    storage: Storage


class DocumentGroups(BaseModel):
    groups: list[str] | None = Field(
        description="Names of the tenant's groups whose members may read it; null: everyone."
    )


class DocumentDeleted(BaseModel):
    id: str
    object: Literal["knowledge.document.deleted"]
    deleted: bool


def document_object(document: Document) -> DocumentObject:
    return DocumentObject(
        id=document.public_id,
        object="knowledge.document",
        title=document.title,
        filename=document.filename,
        format=document.kind,
        bytes=document.size,
        sha256=document.sha256,
        version=document.version,
        status=document.status,  # type: ignore[arg-type]
        progress=document.progress,
        error=document.error or None,
        pages=document.pages,
        passages=document.chunk_count,
        created_at=int(document.created_at.timestamp()),
        updated_at=int(document.updated_at.timestamp()),
        indexed_at=int(document.indexed_at.timestamp()) if document.indexed_at else None,
        groups=sorted(g.name for g in document.groups.all()) if document.audience else None,
        origin=document.origin or None,
    )


def _json(model: BaseModel, status: int = 200) -> JsonResponse:
    return JsonResponse(model.model_dump(mode="json"), status=status)


def _refused(exc: services.KnowledgeError) -> ApiError:
    return ApiError(exc.status, exc.message, code=exc.code, param="file")


def _upload(request: HttpRequest) -> tuple[services.Upload, str, list[str] | None]:
    """The multipart form's file (title, and groups: repeated fields or one comma-separated),
    checked for size before it is parsed."""
    limit = int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        length = 0
    if length > limit + MULTIPART_SLACK:
        raise ApiError(
            413,
            f"The upload is {length / 1048576:,.1f} MB; one file may be at most "
            f"{limit / 1048576:,.0f} MB.",
            code="file_too_large",
            param="file",
        )
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise ApiError(
            400,
            "Send the file as multipart/form-data, in a field named `file`.",
            code="invalid_request",
            param="file",
        )
    form: Any
    files: Any
    try:
        if request.method == "POST":
            form, files = request.POST, request.FILES
        else:  # Django parses multipart bodies of POST only; from the stream, as it does
            # (request.body would hold the whole file in memory, within 2.5 MB)
            form, files = MultiPartParser(
                request.META,
                request,  # type: ignore[arg-type]  # file-like: Django passes it so itself
                request.upload_handlers,
                request.encoding,
            ).parse()
    except RequestDataTooBig:
        # A text field (not the file) over Django's DATA_UPLOAD_MAX_MEMORY_SIZE: it would be
        # held in memory whole. Once a 500.
        raise ApiError(
            413,
            "A form field other than `file` is larger than "
            f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE / 1e6:,.1f} MB: send the document's text "
            "as the file, and only a short `title` beside it.",
            code="request_too_large",
        ) from None
    except SuspiciousOperation as exc:  # too many fields or files in one form
        raise ApiError(400, f"The form cannot be read: {exc}", code="invalid_request") from None
    except (MultiPartParserError, ValueError) as exc:
        raise ApiError(400, f"The form cannot be read: {exc}", code="invalid_request") from None
    file = files.get("file")
    if not isinstance(file, UploadedFile):
        raise ApiError(400, "The form has no `file` field.", code="invalid_request", param="file")
    title = str(form.get("title") or "")[:300]
    raw_groups = [g for value in form.getlist("groups") for g in str(value).split(",")]
    groups = [g.strip() for g in raw_groups if g.strip()] or None
    return services.Upload(file.name or "upload", file.read()), title, groups


def _groups(
    principal: Principal, names: list[str] | None, reader: Reader
) -> list[TenantGroup] | None:
    """The tenant's groups named `names` (None: everyone), each one the key may read."""
    if names is None:
        return None
    try:
        groups = services.groups_by_name(tenant=principal.tenant, names=names)
    except services.KnowledgeError as exc:
        raise ApiError(400, exc.message, code=exc.code, param="groups") from None
    for group in groups:
        if reader.groups is not None and group.pk not in reader.groups:
            raise ApiError(
                400,
                f"This key may not limit documents to “{group.name}”: its scope does not "
                "cover that group.",
                code="invalid_group",
                param="groups",
            )
    return groups


# max_body=None: an upload is bounded by _upload, by QASSIST_KNOWLEDGE_MAX_FILE_MB.
@api_endpoint(methods=("GET", "POST"), max_body=None)
async def documents(request: HttpRequest) -> HttpResponseBase:
    principal = _principal(request)
    if request.method == "GET":
        return _json(await database_sync_to_async(_list)(principal))
    upload, title, names = _upload(request)
    return _json(
        await database_sync_to_async(_upload_as)(principal, upload, title, names), status=202
    )


def _upload_as(
    principal: Principal, upload: services.Upload, title: str, names: list[str] | None
) -> DocumentObject:
    groups = _groups(principal, names, reader_for_principal(principal))
    try:
        document = services.document_upload(
            tenant=principal.tenant,
            upload=upload,
            title=title,
            api_key=principal.api_key,
            groups=groups,
        )
    except services.KnowledgeError as exc:
        raise _refused(exc) from None
    return document_object(document)


def _list(principal: Principal) -> DocumentList:
    tenant = principal.tenant
    kb = services.knowledge_base(tenant=tenant)
    rows = list(
        services.tenant_documents(
            tenant=tenant, reader=reader_for_principal(principal)
        ).prefetch_related("groups")
    )
    # Storage is the tenant's, every document counted (the limit is the tenant's too).
    used = services.knowledge_usage(tenant_ids=[tenant.pk])[tenant.pk].used
    return DocumentList(
        object="list",
        data=[document_object(d) for d in rows],
        storage=Storage(used_bytes=used, limit_bytes=kb.storage_limit_bytes),
    )


def _get(principal: Principal, document_id: str) -> Document:
    return services.tenant_document_get(
        tenant=principal.tenant, document_id=document_id, reader=reader_for_principal(principal)
    )


def _patch(principal: Principal, found: Document, body: bytes) -> DocumentObject:
    try:
        data = parse_json(body)
    except JsonInputError as exc:
        raise ApiError(400, str(exc), code="invalid_json") from None
    if not isinstance(data, dict) or "groups" not in data:
        raise ApiError(
            400, 'Send {"groups": ["HR", ...]} or {"groups": null}.', code="invalid_request"
        )
    names = data["groups"]
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise ApiError(400, "`groups` is a list of group names, or null.", param="groups")
    groups = _groups(principal, names, reader_for_principal(principal))
    try:
        document = services.document_set_groups(document=found, groups=groups)
    except services.KnowledgeError as exc:
        raise ApiError(400, exc.message, code=exc.code, param="groups") from None
    return document_object(document)


@api_endpoint(methods=("GET", "PUT", "PATCH", "DELETE"), max_body=None)
async def document(request: HttpRequest, document_id: str) -> HttpResponseBase:
    principal = _principal(request)
    found = await database_sync_to_async(_get)(principal, document_id)
    if request.method == "GET":
        return _json(await database_sync_to_async(document_object)(found))
    if request.method == "PATCH":
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length > MAX_PATCH_BYTES:
            raise ApiError(413, "The body is too large.", code="request_too_large")
        body = request.read(MAX_PATCH_BYTES + 1)
        if len(body) > MAX_PATCH_BYTES:
            raise ApiError(413, "The body is too large.", code="request_too_large")
        return _json(await database_sync_to_async(_patch)(principal, found, body))
    if request.method == "DELETE":
        public_id = found.public_id  # the instance has no id once deleted
        await database_sync_to_async(services.document_delete)(document=found)
        return _json(
            DocumentDeleted(id=public_id, object="knowledge.document.deleted", deleted=True)
        )
    upload, title, _names = _upload(request)
    try:
        replaced = await database_sync_to_async(services.document_replace)(
            document=found, upload=upload, title=title
        )
    except services.KnowledgeError as exc:
        raise _refused(exc) from None
    return _json(await database_sync_to_async(document_object)(replaced), status=202)


@api_endpoint(methods=("GET",))
async def document_content(request: HttpRequest, document_id: str) -> HttpResponseBase:
    principal = _principal(request)
    found = await database_sync_to_async(_get)(principal, document_id)
    data = await database_sync_to_async(services.document_data)(document=found)
    response = HttpResponse(data, content_type=services.content_type(found.kind))
    response["Content-Disposition"] = services.content_disposition(found.filename)
    return response
