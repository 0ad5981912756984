"""Company knowledge in the admin: each tenant's documents, uploaded several at a time, with
their indexing progress; a new version of a file, another indexing run, deletion; the tenant's
knowledge settings on its own page (`KnowledgeBaseInline`, shown by tenants.admin).

Only the tenants' knowledge bases appear here. A document attached to a conversation
(`Document.session` set) is its owner's private file: no admin page lists, opens or counts it,
a superuser's included (docs/privacy.md). Every change goes through knowledge.services, which
checks files and limits, queues indexing and tells retrieval that a tenant's passages moved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.core.paginator import Page, Paginator
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime

from knowledge import parsers, services
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.parsers.detect import EXTENSIONS, SUPPORTED_TEXT
from tenants.admin_scope import TenantScopedAdmin, admin_tenants, is_tenant_admin, tenant_filter
from tenants.models import Tenant, TenantGroup

FORMAT_NAMES = {
    parsers.PDF: "PDF",
    parsers.DOCX: "Word (.docx)",
    parsers.HTML: "HTML",
    parsers.MARKDOWN: "Markdown",
    parsers.TEXT: "Plain text",
}
ACCEPT = ",".join(EXTENSIONS)  # the file picker offers what qassist reads
UPLOAD_RESULTS_SESSION = "qassist_document_upload_results"


def _user(request: HttpRequest) -> User | None:
    user = request.user
    return user if isinstance(user, User) else None


def _max_files() -> int | None:
    """Files one upload may hold: Django refuses a request with more before any view runs."""
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
    return int(limit) if limit else None


def _max_file_bytes() -> int:
    return int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024


def _busy(html: str) -> str:
    """Progress marked as unfinished: static/qassist_admin/refresh.js reloads the page while
    one is on it."""
    return format_html('<span class="qa-wait" data-qa-busy="1">{}</span>', html)


def upload_tenants(tenants: QuerySet[Tenant] | None) -> QuerySet[Tenant]:
    """The tenants one may upload to: all for superusers (`tenants` None), else theirs."""
    return (Tenant.objects.all() if tenants is None else tenants).order_by("name")


# --- forms -----------------------------------------------------------------------------------


class MultipleFileInput(forms.FileInput):
    """`<input type="file" multiple>`: Django's file input takes one file unless told."""

    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Every file of one input, as a list. Each file is checked by the upload service, not
    here, so that a bad one is refused on its own, with its reason, and the others go in."""

    widget = MultipleFileInput

    def clean(self, data: Any, initial: Any = None) -> list[UploadedFile]:
        chosen = data if isinstance(data, list | tuple) else [data]
        files = [f for f in chosen if isinstance(f, UploadedFile)]
        if not files and self.required:
            raise ValidationError(self.error_messages["required"], code="required")
        return files


class DocumentUploadForm(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(), help_text="Whose knowledge base the documents join."
    )
    documents = MultipleFileField(
        label="Files",
        help_text="Choose several at once if you like (hold Ctrl or ⌘, or Shift).",
    )
    title = forms.CharField(
        max_length=300,
        required=False,
        help_text="Only when uploading one file. Empty: the document's own title (a PDF's or "
        "an HTML page's, a Markdown file's first heading), else its file name.",
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=TenantGroup.objects.none(),
        required=False,
        label="Only for these groups",
        widget=forms.CheckboxSelectMultiple,
        help_text="None chosen: everyone in the tenant may read them. Else only members of the "
        "groups chosen (groups of the tenant above).",
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = upload_tenants(tenants)
        groups = self.fields["groups"]
        assert isinstance(groups, forms.ModelMultipleChoiceField)
        groups.queryset = TenantGroup.objects.filter(tenant__in=field.queryset).select_related(
            "tenant"
        )
        groups.label_from_instance = lambda g: f"{g.tenant}: {g.name}"  # type: ignore[method-assign,assignment]
        if tenants is not None and len(field.queryset) == 1:
            field.empty_label = None  # their one tenant, chosen already
        attrs = {"accept": ACCEPT, "data-qa-max-bytes": str(_max_file_bytes())}
        if _max_files():
            attrs["data-qa-max-files"] = str(_max_files())
        self.fields["documents"].widget.attrs.update(attrs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant")
        if tenant is not None and any(
            g.tenant_id != tenant.pk for g in cleaned.get("groups") or []
        ):
            self.add_error("groups", f"Choose groups of {tenant}.")
        if str(cleaned.get("title") or "").strip() and len(cleaned.get("documents") or []) > 1:
            self.add_error(
                "title",
                "A title names one document: leave it empty when uploading several files "
                "(each is named by its own title or its file name).",
            )
        return cleaned


class DocumentReadersForm(forms.Form):
    """Who may read a document (knowledge.access), on its page; fields joined to the form
    `readers-form` by their `form` attribute, like the replacement's."""

    limited = forms.BooleanField(
        required=False,
        label="Only some groups",
        widget=forms.CheckboxInput(attrs={"form": "readers-form"}),
        help_text="Off: everyone in the tenant reads it. On: only members of the groups chosen "
        "(none chosen: nobody but the admin). A synced document follows its source's setting at "
        "the source's next sync.",
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=TenantGroup.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple(attrs={"form": "readers-form"}),
        help_text="The tenant's groups (Tenants and people › Groups).",
    )

    def __init__(self, *args: Any, document: Document, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["groups"]
        assert isinstance(field, forms.ModelMultipleChoiceField)
        field.queryset = TenantGroup.objects.filter(tenant_id=document.tenant_id)
        if not self.is_bound:
            self.initial = {"limited": bool(document.audience), "groups": document.groups.all()}


class DocumentReplaceForm(forms.Form):
    """On the document's page, outside its (read-only) record form: the fields belong to the
    form `replace-form` by their `form` attribute."""

    file = forms.FileField(
        allow_empty_file=True,  # the service refuses it, with the same words as an upload
        label="New version",
        widget=forms.FileInput(attrs={"form": "replace-form", "accept": ACCEPT}),
        help_text="Indexed in the background; until it is ready, the passages of the current "
        "version (if it has any) keep answering questions.",
    )
    title = forms.CharField(
        max_length=300,
        required=False,
        label="New title",
        widget=forms.TextInput(attrs={"form": "replace-form"}),
        help_text="Empty: the title stays as it is.",
    )


@dataclass(frozen=True)
class UploadResult:
    """One file of an upload, as the upload page lists it afterwards."""

    filename: str
    accepted: bool
    message: str
    url: str = ""


# --- documents -------------------------------------------------------------------------------


class FormatFilter(admin.SimpleListFilter):
    title = "format"
    parameter_name = "format"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(FORMAT_NAMES.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(kind=self.value()) if self.value() else queryset


def _answering_version(document: Document) -> int | None:
    """The version whose passages answer questions now (None: none has any)."""
    if hasattr(document, "answering_version"):  # annotated by DocumentAdmin.get_queryset
        version = getattr(document, "answering_version")  # noqa: B009 - not a model field
    else:
        version = Chunk.objects.filter(document=document).values_list("version", flat=True).first()
    return int(version) if version is not None else None


def status_text(document: Document) -> str:
    """ "Queued", "Indexing 40%", "Ready", "Failed", and which version answers meanwhile."""
    status = Document.Status
    if document.status == status.QUEUED:
        text = "Queued"
        if document.needs_dispatch:
            text += " · waiting for the task queue (retried every minute)"
    elif document.status == status.INDEXING:
        text = f"Indexing {document.progress}%"
    else:
        text = document.get_status_display()
    answering = _answering_version(document)
    if document.status != status.READY and answering is not None:
        verb = "still answers" if document.status == status.FAILED else "answers meanwhile"
        text += f" · version {answering} {verb}"
    return text


def status_html(document: Document) -> str:
    """The status, with a bar while indexing; marked busy (the page reloads) until done."""
    text = status_text(document)
    if document.status == Document.Status.INDEXING:
        return format_html(
            '<span class="qa-progress"><progress max="100" value="{}">{}%</progress> {}</span>',
            document.progress,
            document.progress,
            _busy(text),
        )
    if document.status == Document.Status.QUEUED:
        return _busy(text)
    return text


def _when(value: datetime | None) -> str:
    return date_format(localtime(value), "DATETIME_FORMAT") if value is not None else "—"


@dataclass(frozen=True)
class PassageRow:
    number: int
    where: str
    tokens: int
    text: str


PASSAGE_CHARS_SHOWN = 300


def _first_lines(text: str, *, lines: int = 3) -> str:
    shown = "\n".join(line for line in text.strip().splitlines()[:lines])
    if len(shown) > PASSAGE_CHARS_SHOWN:
        return shown[: PASSAGE_CHARS_SHOWN - 1] + "…"
    return shown + ("…" if len(text.strip().splitlines()) > lines else "")


def _passage_row(chunk: Chunk) -> PassageRow:
    where = chunk.headings or "—"
    if chunk.page is not None:
        pages = f"page {chunk.page}"
        if chunk.page_end is not None and chunk.page_end != chunk.page:
            pages = f"pages {chunk.page}–{chunk.page_end}"
        where = pages if where == "—" else f"{where}, {pages}"
    return PassageRow(chunk.ordinal + 1, where, chunk.tokens, _first_lines(chunk.text))


DOCUMENT_FIELDS = [
    "title",
    "tenant",
    "readers",
    "origin_text",
    "filename",
    "file_format",
    "size_text",
    "download",
    "status_html",
    "error",
    "version",
    "page_count",
    "chunk_count",
    "uploaded_by_text",
    "uploaded_at",
    "changed_at",
    "indexed",
    "checksum",
]


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin[Document]):
    tenant_column_for_one_tenant = False
    """A tenant's documents: uploaded on a page of their own (several files at once), listed
    with their indexing progress; each one's page offers its file, a new version, another
    indexing run and deletion, and the passages it was indexed into."""

    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    change_list_template = "admin/knowledge/document/change_list.html"
    change_form_template = "admin/knowledge/document/change_form.html"
    list_display = [
        "title",
        "tenant",
        "file_format",
        "size_text",
        "status_and_error",
        "passages",
        "version",
        "uploaded",
    ]
    list_filter = [tenant_filter(), "status", FormatFilter]
    list_select_related = ["tenant", "uploaded_by", "api_key"]
    search_fields = ["title", "filename"]
    search_help_text = "Finds documents by title or file name."
    actions = ["delete_selected", "reindex_selected"]
    fields = tuple(DOCUMENT_FIELDS)
    readonly_fields = tuple(DOCUMENT_FIELDS)
    passages_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        # The tenants' knowledge bases only: conversations' attachments are their owners'.
        documents = super().get_queryset(request).filter(session__isnull=True)
        answering = Chunk.objects.filter(document=OuterRef("pk")).order_by().values("version")
        return documents.annotate(answering_version=Subquery(answering[:1]))

    # --- who may do what ---------------------------------------------------------------------

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record is not edited: its page has no Save button

    def has_manage_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Replace the file, index again: superusers, and tenant admins of its tenant."""
        return super().has_change_permission(request, obj)

    def _document_or_404(self, request: HttpRequest, object_id: str) -> Document:
        """The document if this person may see it; anything else (another tenant's, an
        attachment, a malformed id) is "not found" like one that never existed."""
        document = self.get_object(request, object_id)
        if document is None or not self.has_view_permission(request, document):
            raise Http404("No such document.")
        return document

    # --- columns and fields ------------------------------------------------------------------

    @admin.display(description="format", ordering="kind")
    def file_format(self, obj: Document) -> str:
        return FORMAT_NAMES.get(obj.kind, obj.kind)

    @admin.display(description="size", ordering="size")
    def size_text(self, obj: Document) -> str:
        return services.human_size(obj.size)

    @admin.display(description="status", ordering="status")
    def status_html(self, obj: Document) -> str:
        return status_html(obj)

    @admin.display(description="status", ordering="status")
    def status_and_error(self, obj: Document) -> str:
        """The list's column: a failure's reason under it (one column less)."""
        if obj.status == Document.Status.FAILED and obj.error:
            return format_html(
                '{}<br><span class="qa-error">{}</span>', status_html(obj), obj.error
            )
        return status_html(obj)

    @admin.display(description="passages", ordering="chunk_count")
    def passages(self, obj: Document) -> str:
        """ "36 (3 pages)" for a paged format, "43" otherwise: one column for both."""
        if obj.pages:
            return f"{obj.chunk_count} ({obj.pages} page{'s' if obj.pages != 1 else ''})"
        return str(obj.chunk_count)

    @admin.display(description="pages")
    def page_count(self, obj: Document) -> str:
        return str(obj.pages) if obj.pages else "—"  # only PDFs have pages

    @admin.display(description="uploaded", ordering="created_at")
    def uploaded(self, obj: Document) -> str:
        when = date_format(localtime(obj.created_at), "SHORT_DATETIME_FORMAT")
        return f"{self.uploaded_by_text(obj)}, {when}"

    @admin.display(description="uploaded by")
    def uploaded_by_text(self, obj: Document) -> str:
        if obj.uploaded_by is not None:
            return obj.uploaded_by.get_username()
        if obj.api_key is not None:
            return f"API key {obj.api_key.prefix}…"
        return "—"

    @admin.display(description="uploaded", ordering="created_at")
    def uploaded_at(self, obj: Document) -> str:
        return _when(obj.created_at)

    @admin.display(description="last changed", ordering="updated_at")
    def changed_at(self, obj: Document) -> str:
        return _when(obj.updated_at)

    @admin.display(description="indexed", ordering="indexed_at")
    def indexed(self, obj: Document) -> str:
        return _when(obj.indexed_at)

    @admin.display(description="who may read it")
    def readers(self, obj: Document) -> str:
        if not obj.audience:
            return "Everyone in the tenant"
        names = ", ".join(sorted(g.name for g in obj.groups.all()))
        return f"Members of {names}" if names else "Nobody: its groups were deleted; choose again"

    @admin.display(description="synced from")
    def origin_text(self, obj: Document) -> str:
        return obj.origin or "— (uploaded)"

    @admin.display(description="SHA-256")
    def checksum(self, obj: Document) -> str:
        return obj.sha256

    def get_fields(self, request: HttpRequest, obj: Document | None = None) -> list[Any]:
        if obj is not None and not obj.error:
            return [name for name in DOCUMENT_FIELDS if name != "error"]
        return list(DOCUMENT_FIELDS)

    @admin.display(description="file")
    def download(self, obj: Document) -> str:
        url = reverse("admin:knowledge_document_download", args=[obj.pk])
        return format_html('<a href="{}" id="document-download">Download {}</a>', url, obj.filename)

    # --- pages -------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        own = [
            path("upload/", view(self.upload_view), name="knowledge_document_upload"),
            path(
                "<path:object_id>/download/",
                view(self.download_view),
                name="knowledge_document_download",
            ),
            path(
                "<path:object_id>/replace/",
                view(self.replace_view),
                name="knowledge_document_replace",
            ),
            path(
                "<path:object_id>/reindex/",
                view(self.reindex_view),
                name="knowledge_document_reindex",
            ),
            path(
                "<path:object_id>/readers/",
                view(self.readers_view),
                name="knowledge_document_readers",
            ),
        ]
        return own + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        wanted = request.GET.get("tenant__id__exact")
        if wanted is not None and not self._tenant_visible(request, wanted):
            raise Http404("No such tenant.")  # another tenant's, or none: alike
        return super().changelist_view(request, extra_context)

    @staticmethod
    def _tenant_visible(request: HttpRequest, tenant_id: str) -> bool:
        try:
            pk = int(tenant_id)
        except ValueError:
            return False
        tenants = admin_tenants(request)
        return (Tenant.objects.all() if tenants is None else tenants).filter(pk=pk).exists()

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:knowledge_document_upload"))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        document = self._document_or_404(request, object_id)
        chunks = Chunk.objects.filter(document=document).order_by("ordinal")
        page: Page[Chunk] = Paginator(
            chunks.only("ordinal", "headings", "page", "page_end", "tokens", "text", "version"),
            self.passages_per_page,
        ).get_page(request.GET.get("p"))
        context = {
            "document": document,
            "status_notice": _status_notice(document),
            "answering_version": _answering_version(document),
            "passages_page": page,
            "passage_rows": [_passage_row(chunk) for chunk in page.object_list],
            "can_manage": self.has_manage_permission(request, document),
            "can_reindex": document.status in (Document.Status.READY, Document.Status.FAILED),
            "replace_form": DocumentReplaceForm(),
            "readers_form": DocumentReadersForm(document=document),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        self._document_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        """Back to the documents list (Django sends whoever lacks the model-wide change
        permission, every tenant admin, to the admin home instead)."""
        response = super().response_delete(request, obj_display, obj_id)
        if IS_POPUP_VAR in request.POST:
            return response
        return HttpResponseRedirect(reverse("admin:knowledge_document_changelist"))

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        self._document_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def download_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        document = self._document_or_404(request, object_id)
        response = HttpResponse(
            services.document_data(document=document),
            content_type=services.content_type(document.kind),
        )
        response["Content-Disposition"] = services.content_disposition(document.filename)
        response["X-Content-Type-Options"] = "nosniff"  # HTML is sent as text: never a page
        return response

    def replace_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        document = self._document_or_404(request, object_id)
        if not self.has_manage_permission(request, document):
            raise PermissionDenied
        back = HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))
        if request.method != "POST":
            return back
        form = DocumentReplaceForm(request.POST, request.FILES)
        if not form.is_valid():
            problems = [str(e) for errors in form.errors.values() for e in errors]
            self.message_user(request, "Nothing replaced: " + " ".join(problems), messages.ERROR)
            return back
        file: UploadedFile = form.cleaned_data["file"]
        before, answering = document.version, _answering_version(document)
        try:
            services.check_file_size(file.size or 0)  # before reading a file far too large
            document = services.document_replace(
                document=document,
                upload=services.Upload(file.name or document.filename, file.read()),
                title=form.cleaned_data["title"],
                user=_user(request),
            )
        except services.KnowledgeError as error:
            self.message_user(request, f"Nothing replaced: {error.message}", messages.ERROR)
            return back
        self.log_change(
            request,
            document,
            f"Replaced the file with {document.filename}: version {before} → {document.version}.",
        )
        meanwhile = (
            f"version {answering} answers questions until it is ready."
            if answering is not None
            else "it answers questions once it is ready."
        )
        self.message_user(
            request,
            f"Version {document.version} is queued for indexing; {meanwhile}",
            messages.SUCCESS,
        )
        return back

    def readers_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        document = self._document_or_404(request, object_id)
        if not self.has_manage_permission(request, document):
            raise PermissionDenied
        back = HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))
        if request.method != "POST":
            return back
        form = DocumentReadersForm(request.POST, document=document)
        if not form.is_valid():
            self.message_user(
                request, "Nothing changed: choose the tenant's groups.", messages.ERROR
            )
            return back
        groups = list(form.cleaned_data["groups"]) if form.cleaned_data["limited"] else None
        services.document_set_groups(document=document, groups=groups)
        self.log_change(request, document, f"Who may read it: {self.readers(document)}.")
        self.message_user(request, f"Who may read it: {self.readers(document)}.", messages.SUCCESS)
        return back

    def reindex_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        document = self._document_or_404(request, object_id)
        if not self.has_manage_permission(request, document):
            raise PermissionDenied
        if request.method == "POST":
            self._reindex(request, [document])
        return HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))

    def _reindex(self, request: HttpRequest, documents: list[Document]) -> None:
        queued, busy = 0, 0
        for document in documents:
            if document.status in (Document.Status.QUEUED, Document.Status.INDEXING):
                busy += 1
                continue
            services.document_reindex(document=document)
            self.log_change(request, document, f"Queued version {document.version} to index again.")
            queued += 1
        if queued:
            self.message_user(
                request, f"Queued {queued} document(s) to index again.", messages.SUCCESS
            )
        if busy:
            self.message_user(
                request,
                f"{busy} document(s) already queued or being indexed: left as they are.",
                messages.WARNING,
            )

    @admin.action(description="Index selected documents again", permissions=["manage"])
    def reindex_selected(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        self._reindex(request, list(queryset))

    # --- deleting, always through the service ------------------------------------------------

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        services.document_delete(document=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        # One by one through the service, never the queryset's own delete: it moves the
        # tenant's index version, so every process drops the passages from its memory.
        for document in queryset:
            services.document_delete(document=document)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """What a deletion takes, said in a line per document (not a line per passage)."""
        documents = list(objs)
        lines = [
            f"{document} ({document.filename}): the file, its {document.chunk_count} "
            "passage(s) and their search entries"
            for document in documents
        ]
        passages = Chunk.objects.filter(document__in=documents).count()
        counts = {"documents": len(documents), "passages": passages}
        return lines, counts, set(), []

    # --- uploading ---------------------------------------------------------------------------

    def upload_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        tenants = admin_tenants(request)
        form = DocumentUploadForm(
            request.POST if request.method == "POST" else None,
            request.FILES if request.method == "POST" else None,
            tenants=tenants,
            initial={"tenant": request.GET.get("tenant")},
        )
        if request.method == "POST" and form.is_valid():
            tenant: Tenant = form.cleaned_data["tenant"]
            title: str = form.cleaned_data["title"]
            groups = list(form.cleaned_data["groups"]) or None
            results = [
                self._upload_one(request, tenant, file, title, groups)
                for file in form.cleaned_data["documents"]
            ]
            # Post/Redirect/Get: the results wait in the session for the page that shows
            # them, so reloading it never sends the files again.
            request.session[UPLOAD_RESULTS_SESSION] = [asdict(result) for result in results]
            upload_url = reverse("admin:knowledge_document_upload")
            return HttpResponseRedirect(f"{upload_url}?tenant={tenant.pk}")
        results = []
        if request.method == "GET":
            stash = request.session.pop(UPLOAD_RESULTS_SESSION, None) or []
            results = [UploadResult(**row) for row in stash if isinstance(row, dict)]
        choices = list(upload_tenants(tenants))
        usage = services.knowledge_usage(tenant_ids=[t.pk for t in choices])
        selected = next((t for t in choices if str(t.pk) == request.GET.get("tenant")), None)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Upload documents",
            "form": form,
            "results": results,
            "accepted": sum(1 for r in results if r.accepted),
            "usage": [(t, usage[t.pk]) for t in choices],
            "max_file_mb": settings.QASSIST_KNOWLEDGE_MAX_FILE_MB,
            "max_files": _max_files(),
            "formats": SUPPORTED_TEXT,
            "list_url": self._list_url(selected),
        }
        return TemplateResponse(request, "admin/knowledge/document/upload.html", context)

    def _list_url(self, tenant: Tenant | None) -> str:
        url = reverse("admin:knowledge_document_changelist")
        return f"{url}?tenant__id__exact={tenant.pk}" if tenant is not None else url

    def _upload_one(
        self,
        request: HttpRequest,
        tenant: Tenant,
        file: UploadedFile,
        title: str,
        groups: list[TenantGroup] | None = None,
    ) -> UploadResult:
        name = file.name or "upload"
        try:
            services.check_file_size(file.size or 0)  # before reading a file far too large
            document = services.document_upload(
                tenant=tenant,
                upload=services.Upload(name, file.read()),
                title=title,
                uploaded_by=_user(request),
                groups=groups,
            )
        except services.KnowledgeError as error:
            return UploadResult(name, accepted=False, message=error.message)
        self.log_addition(request, document, [{"added": {}}])
        url = reverse("admin:knowledge_document_change", args=[document.pk])
        return UploadResult(name, accepted=True, message="Queued for indexing.", url=url)


def _status_notice(document: Document) -> str:
    """What the document's state means for questions, in a sentence or two."""
    if document.status == Document.Status.READY:
        return (
            f"Ready: questions in {document.tenant} are answered from its "
            f"{document.chunk_count} passage(s)."
        )
    answering = _answering_version(document)
    if document.status == Document.Status.FAILED:
        then = (
            f"Version {answering} still answers questions."
            if answering is not None
            else "None of it answers questions."
        )
        return (
            f"Indexing version {document.version} failed: {document.error} {then} Replace the "
            "file with a readable one, or index it again once the cause is fixed."
        )
    head = (
        "Queued for indexing"
        if document.status == Document.Status.QUEUED
        else f"Being indexed: {document.progress}%"
    )
    meanwhile = (
        f"Version {answering} answers questions until it is ready."
        if answering is not None
        else "It answers questions once it is ready."
    )
    return f"{head} (version {document.version}). {meanwhile}"


# --- the knowledge settings, on the tenant's page ------------------------------------------------


class KnowledgeBaseInline(admin.StackedInline[KnowledgeBase, Tenant]):
    """A tenant's knowledge settings and usage. Superusers set the storage limit; a tenant's
    admins choose how its documents are used (the mode) and see how much room is left."""

    model = KnowledgeBase
    can_delete = False
    extra = 1
    max_num = 1
    readonly_fields = ["storage", "documents"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        if request.user.is_superuser:
            return [(None, {"fields": ["mode", "storage_limit_mb", "storage", "documents"]})]
        return [
            (
                None,
                {
                    "fields": ["mode", "storage", "documents"],
                    "description": "Only superusers change the storage limit.",
                },
            )
        ]

    def _allowed(self, request: HttpRequest) -> bool:
        # The tenant's page is scoped already (TenantAdmin): its settings are theirs too.
        return bool(request.user.is_superuser) or is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="storage used")
    def storage(self, obj: KnowledgeBase) -> str:
        if obj.tenant_id is None:
            return "—"  # a tenant being added
        return services.knowledge_usage(tenant_ids=[obj.tenant_id])[obj.tenant_id].storage_text

    @admin.display(description="documents")
    def documents(self, obj: KnowledgeBase) -> str:
        if obj.tenant_id is None:
            return "—"
        usage = services.knowledge_usage(tenant_ids=[obj.tenant_id])[obj.tenant_id]
        listed = reverse("admin:knowledge_document_changelist")
        upload = reverse("admin:knowledge_document_upload")
        return format_html(
            '{} · <a href="{}?tenant__id__exact={}">See them</a> · '
            '<a href="{}?tenant={}">Upload documents</a>',
            usage.documents_text,
            listed,
            obj.tenant_id,
            upload,
            obj.tenant_id,
        )
