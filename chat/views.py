"""The chat UI: two pages (a new chat, a conversation) and the small JSON endpoints the page
calls (sidebar search, rename, archive, restore, delete, reload a conversation's messages;
attach files to a conversation, open a reply's sources).

Replies themselves stream over the websocket (chat/consumers.py, docs/websocket.md). Someone
else's session is a 404; an archived one opens read-only, where it can be restored or deleted.
JSON endpoints answer bad input with a 400 and `{"error": {"code", "message"}}`, and an
anonymous caller with a 401 instead of a redirect.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat import admission
from chat.models import ChatSession
from chat.services import sessions as chat_sessions
from chat.services.branches import branch_data, branch_switch
from chat.services.checks import MAX_MESSAGE_CHARS, ChatError, check_session_id
from chat.services.instructions import (
    MAX_INSTRUCTIONS_CHARS,
    custom_instructions_get,
    custom_instructions_set,
    instructions_tokens,
)
from chat.services.turns import draft_conversations
from feedback.services import messages_with_feedback
from knowledge import services as knowledge
from knowledge.access import reader_for_user
from knowledge.models import Document
from knowledge.services import KnowledgeError
from qassist.errors import json_error
from qassist.json_input import JsonInputError, parse_json
from tenants.models import Membership
from tenants.services import (
    membership_for,
    prompt_suggestions_for,
    tenant_models,
    tenants_administered_by,
    tenants_for_user,
)

View = Callable[..., HttpResponse]

SIDEBAR_SESSIONS = 200  # the sidebar shows this many; search reaches the rest
MAX_TITLE_CHARS = 200  # ChatSession.title's max_length
MAX_QUERY_CHARS = 200
PLACEHOLDER_ID = uuid.UUID(int=0)


class BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- decorators ------------------------------------------------------------------------------


def json_endpoint(view: View) -> View:
    """Every answer in JSON: 401 for anonymous callers (the page's fetch would not follow a
    login redirect usefully), BadRequest / ChatError as a 400, a missing or someone else's
    session as a 404, and the plain answers of the method decorators (405) as JSON too."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return _json_error("login_required", "Log in again.", status=401)
        try:
            response = view(request, *args, **kwargs)
        except (BadRequest, ChatError) as exc:
            return _json_error(exc.code, exc.message)
        except KnowledgeError as exc:
            return _json_error(exc.code, exc.message, status=exc.status)
        except Http404 as exc:
            return _json_error("not_found", str(exc) or "No such conversation.", status=404)
        except PermissionDenied:
            return _json_error("forbidden", "You may not do that.", status=403)
        if isinstance(response, HttpResponseNotAllowed):
            allowed = response.headers["Allow"]
            json_response = _json_error(
                "method_not_allowed", f"Use {allowed} for this address.", status=405
            )
            json_response.headers["Allow"] = allowed
            return json_response
        return response

    return wrapped


def _json_error(code: str, message: str, status: int = 400) -> JsonResponse:
    return json_error(code, message, status)


# --- helpers ---------------------------------------------------------------------------------


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # every caller is behind login_required or json_endpoint
    return user


def _current_membership(request: HttpRequest) -> Membership | None:
    """The tenant chosen in this web session, else the user's first; the session is kept in
    step so the websocket consumer, which reads session["tenant"], agrees with the page."""
    user = _user(request)
    chosen = request.session.get("tenant")
    membership = membership_for(user=user, tenant_slug=chosen) if chosen else None
    if membership is None:
        membership = membership_for(user=user)
        slug = membership.tenant.slug if membership is not None else None
        if slug != chosen:
            if slug is None:
                request.session.pop("tenant", None)
            else:
                request.session["tenant"] = slug
    return membership


def _own_session(request: HttpRequest, session_id: uuid.UUID) -> ChatSession:
    return chat_sessions.session_get(user=_user(request), session_id=session_id)


def _payload(request: HttpRequest) -> dict[str, Any]:
    """A JSON object body, or the form fields of a form POST."""
    if request.content_type != "application/json":
        return request.POST.dict()
    try:
        data = parse_json(request.body or b"{}")
    except JsonInputError as exc:
        message = "The request body is not valid JSON." if exc.kind == "invalid" else exc.message
        raise BadRequest("bad_json", message) from None
    if not isinstance(data, dict):
        raise BadRequest("bad_json", "The request body must be a JSON object.")
    return data


def session_data(session: ChatSession) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "title": session.title,
        "updated_at": session.updated_at.isoformat(),
        "archived": session.archived,
        "pinned": session.pinned_at is not None,
    }


def _visible_messages(session: ChatSession, user: User) -> list[dict[str, Any]]:
    """The branch shown, each reply with the user's own rating of it (feedback)."""
    return messages_with_feedback(user=user, messages=branch_data(session=session))


# --- pages -----------------------------------------------------------------------------------


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """A new, empty chat; the first message creates the session (over the websocket)."""
    return _chat_page(request, None)


@login_required
@require_GET
def conversation(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """A live conversation, or an archived one shown read-only (restore or delete it there)."""
    try:
        session = _own_session(request, session_id)
    except Http404:
        session = chat_sessions.archived_session_get(user=_user(request), session_id=session_id)
    membership = _current_membership(request)
    if membership is None or membership.tenant_id != session.tenant_id:
        # A conversation of the user's other tenant: open it there, if they are still in it.
        other = membership_for(user=_user(request), tenant_slug=session.tenant.slug)
        if other is None:
            raise Http404("No such conversation.")
        request.session["tenant"] = session.tenant.slug
    return _chat_page(request, session)


def _chat_page(request: HttpRequest, session: ChatSession | None) -> HttpResponse:
    user = _user(request)
    membership = _current_membership(request)
    if membership is None:
        return render(request, "chat/no_tenant.html", status=403)
    sessions = chat_sessions.sessions_for_user(user=user, tenant=membership.tenant)
    knowledge_info = knowledge.knowledge_summary(
        tenant=membership.tenant,
        reader=reader_for_user(user=_user(request), tenant=membership.tenant),
    )
    page_data = {
        "session": session_data(session) if session is not None else None,
        "messages": _visible_messages(session, user) if session is not None else [],
        "urls": {
            "index": reverse("chat:index"),
            "sessions": reverse("chat:session_list"),
            # The page's script puts a session id in place of PLACEHOLDER_ID.
            "conversation": reverse("chat:conversation", args=[PLACEHOLDER_ID]),
            "messages": reverse("chat:messages", args=[PLACEHOLDER_ID]),
            "rename": reverse("chat:session_rename", args=[PLACEHOLDER_ID]),
            "archive": reverse("chat:session_archive", args=[PLACEHOLDER_ID]),
            "restore": reverse("chat:session_restore", args=[PLACEHOLDER_ID]),
            "branch": reverse("chat:session_branch", args=[PLACEHOLDER_ID]),
            "measure": reverse("chat:draft_measure"),
            "delete": reverse("chat:session_delete", args=[PLACEHOLDER_ID]),
            "pin": reverse("chat:session_pin", args=[PLACEHOLDER_ID]),
            "export": reverse("sharing:export", args=[PLACEHOLDER_ID]),
            "share": reverse("sharing:share_create", args=[PLACEHOLDER_ID]),
            "shares": reverse("sharing:share_list", args=[PLACEHOLDER_ID]),
            "revoke": reverse("sharing:share_revoke", args=[PLACEHOLDER_ID]),
            "instructions": reverse("chat:custom_instructions"),
            # A reply's feedback address is this plus its id, then "/feedback".
            "feedback": reverse("feedback:reply_feedback", args=[0]).removesuffix("0/feedback"),
            "documents": reverse("chat:session_documents", args=[PLACEHOLDER_ID]),
            "attachNew": reverse("chat:attachment_new_chat"),
            # A passage's address is this plus its id (an integer: no uuid placeholder).
            "passage": reverse("chat:passage", args=[0]).removesuffix("0"),
            "login": reverse("login"),
        },
        "placeholderId": str(PLACEHOLDER_ID),
        "maxMessageChars": MAX_MESSAGE_CHARS,
        "knowledge": knowledge_info,
        "attachments": (
            [attachment_data(d) for d in knowledge.session_attachments(session_id=session.id)]
            if session is not None
            else []
        ),
        "maxFileBytes": int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024,
        "instructions": custom_instructions_get(user_id=user.pk),
        "maxInstructionsChars": MAX_INSTRUCTIONS_CHARS,
        "tenantName": membership.tenant.name,
    }
    context = {
        "session": session,
        "sessions": sessions[:SIDEBAR_SESSIONS],
        "tenant": membership.tenant,
        "tenants": list(tenants_for_user(user=user)),
        "page_data": page_data,
        "admin_link": _runs_something(user),
        "candidate_min_count": settings.QASSIST_CANDIDATE_MIN_COUNT,
        "knowledge": knowledge_info,
        "suggestions": prompt_suggestions_for(tenant=membership.tenant),
        # The picker (issue #36), shown when the tenant allows more than one model.
        "models": tenant_models(tenant=membership.tenant),
        "session_model": session.model if session is not None else "",
    }
    return render(request, "chat/chat.html", context)


def _runs_something(user: User) -> bool:
    """Whether the admin has anything for `user`: a superuser, or a tenant admin (a staff
    account without a tenant to run sees nothing there, so gets no link)."""
    if not (user.is_active and user.is_staff):
        return False
    return user.is_superuser or tenants_administered_by(user=user).exists()


# --- JSON endpoints --------------------------------------------------------------------------


@json_endpoint
@require_GET
def session_list(request: HttpRequest) -> HttpResponse:
    """The sidebar: the user's sessions in the current tenant, newest first; `q` searches
    titles and message text; `archived=1` lists the archived ones instead."""
    query = request.GET.get("q", "").strip()
    archived = request.GET.get("archived", "") in ("1", "true")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest("invalid_query", f"Search for at most {MAX_QUERY_CHARS} characters.")
    membership = _current_membership(request)
    if membership is None:
        return _json_error("no_tenant", "You are not a member of any active tenant.", 403)
    sessions = chat_sessions.sessions_for_user(
        user=_user(request), tenant=membership.tenant, query=query, archived=archived
    )
    return JsonResponse({"sessions": [session_data(s) for s in sessions[:SIDEBAR_SESSIONS]]})


@json_endpoint
@require_GET
def session_messages(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """The stored messages: what the page redraws after a reconnect (an interrupted reply shows
    the part already generated)."""
    session = _own_session(request, session_id)
    return JsonResponse(
        {"session": session_data(session), "messages": _visible_messages(session, _user(request))}
    )


@json_endpoint
@require_POST
def session_rename(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = _own_session(request, session_id)
    title = _payload(request).get("title")
    if not isinstance(title, str):
        raise BadRequest("invalid_title", "Give the new title as text.")
    if len(title.strip()) > MAX_TITLE_CHARS:
        raise BadRequest("invalid_title", f"A title holds at most {MAX_TITLE_CHARS} characters.")
    session = chat_sessions.session_rename(session=session, title=title)
    return JsonResponse({"session": session_data(session)})


@json_endpoint
@require_POST
def session_archive(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = _own_session(request, session_id)
    chat_sessions.session_archive(session=session)
    return JsonResponse({"archived": True, "id": str(session.id)})


@json_endpoint
@require_POST
def session_pin(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """`{"pinned": true}` pins the conversation to the top of the list; false unpins it."""
    session = _own_session(request, session_id)
    pinned = chat_sessions.check_pinned(_payload(request).get("pinned"))
    session = chat_sessions.session_pin(session=session, pinned=pinned)
    return JsonResponse({"session": session_data(session)})


@json_endpoint
@require_http_methods(["GET", "POST"])
def custom_instructions(request: HttpRequest) -> HttpResponse:
    """GET: the user's custom instructions. POST `{"instructions": "..."}` (empty: none):
    saved, read by the model from the next message on, in all their conversations."""
    user = _user(request)
    if request.method == "POST":
        text = custom_instructions_set(user=user, text=_payload(request).get("instructions"))
    else:
        text = custom_instructions_get(user_id=user.pk)
    return JsonResponse({"instructions": text, "limit": MAX_INSTRUCTIONS_CHARS})


@json_endpoint
@require_POST
def draft_measure(request: HttpRequest) -> HttpResponse:
    """How much of the model's window the message being typed would take, with the
    conversation so far: `{session, content}` → `{tokens, token_limit, chars, char_limit,
    message_chars, message_char_limit, fits, fits_alone}`. Stores nothing."""
    membership = _current_membership(request)
    if membership is None:
        return _json_error("no_tenant", "You are not a member of any active tenant.", 403)
    payload = _payload(request)
    content = payload.get("content")
    if not isinstance(content, str):
        raise BadRequest("invalid_message", "Give the message as text.")
    session_id = check_session_id(payload.get("session"))
    in_session, alone = draft_conversations(
        user=_user(request), tenant=membership.tenant, session_id=session_id, content=content
    )
    try:
        room = admission.measure(in_session)
        fits_alone = room.fits if session_id is None else admission.measure(alone).fits
        instructions = instructions_tokens(user=_user(request))
    except FileNotFoundError:  # no model (so no vocabulary) on this server: nothing to count
        return _json_error("worker_down", "The model is not installed on this server.", 503)
    message_ok = len(content) <= MAX_MESSAGE_CHARS
    return JsonResponse(
        {
            "tokens": room.tokens,
            "token_limit": room.token_limit,
            "chars": room.chars,
            "char_limit": room.char_limit,
            "message_chars": len(content),
            "message_char_limit": MAX_MESSAGE_CHARS,
            "fits": room.fits and message_ok,
            "fits_alone": fits_alone and message_ok,
            "instructions_tokens": instructions,
        }
    )


@json_endpoint
@require_POST
def session_branch(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """Show another version of a message (`{"message": id}`): the conversation then follows
    that version. Answers with the branch now shown, like the messages endpoint."""
    membership = _current_membership(request)
    if membership is None:
        return _json_error("no_tenant", "You are not a member of any active tenant.", 403)
    session = branch_switch(
        user=_user(request),
        tenant=membership.tenant,
        session_id=session_id,
        message_id=_payload(request).get("message"),
    )
    return JsonResponse(
        {"session": session_data(session), "messages": _visible_messages(session, _user(request))}
    )


@json_endpoint
@require_POST
def session_restore(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = chat_sessions.archived_session_get(user=_user(request), session_id=session_id)
    session = chat_sessions.session_restore(session=session)
    return JsonResponse({"session": session_data(session)})


@json_endpoint
@require_POST
def session_delete(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """Delete an archived conversation and its messages for good (the page asked first)."""
    session = chat_sessions.archived_session_get(user=_user(request), session_id=session_id)
    messages = chat_sessions.session_delete(session=session)
    return JsonResponse({"deleted": True, "id": str(session_id), "messages": messages})


# --- attachments and sources (company knowledge) ----------------------------------------------

MULTIPART_SLACK = 1024 * 1024  # the form's own bytes around the file


def attachment_data(document: Document) -> dict[str, Any]:
    """A conversation's attached file as the page shows it: its indexing status (`queued`,
    `indexing` with `progress`, `ready`, or `failed` with `error`) and where to remove or
    download it."""
    return {
        "id": document.public_id,
        "title": document.title,
        "filename": document.filename,
        "size": document.size,
        "status": document.status,
        "progress": document.progress,
        "error": document.error,
        "url": reverse("chat:attachment", args=[document.pk]),
        "download_url": reverse("chat:document_file", args=[document.pk]),
    }


def _uploaded_file(request: HttpRequest) -> knowledge.Upload:
    """The multipart form's `file`, refused by its size before it is read whole."""
    limit = int(settings.QASSIST_KNOWLEDGE_MAX_FILE_MB) * 1024 * 1024
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        length = 0
    if length > limit + MULTIPART_SLACK:
        knowledge.check_file_size(length)  # raises file_too_large, in the words uploads use
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise BadRequest("invalid_upload", "Send the file as multipart/form-data, field `file`.")
    try:
        file = request.FILES.get("file")
    except MultiPartParserError as exc:
        raise BadRequest("invalid_upload", f"The form cannot be read: {exc}") from None
    if not isinstance(file, UploadedFile):
        raise BadRequest("invalid_upload", "Choose a file to attach.")
    return knowledge.Upload(file.name or "upload", file.read())


def _membership_or_404(request: HttpRequest, what: str) -> Membership:
    """The current tenant's membership; without one, whatever was asked for is not found (an
    ex-member learns nothing of what stays behind)."""
    membership = _current_membership(request)
    if membership is None:
        raise Http404(what)
    return membership


@json_endpoint
@require_http_methods(["GET", "POST"])
def session_documents(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """GET: the files attached to the conversation, with their indexing status (the page polls
    it until each is ready or failed). POST (multipart `file`): attach one more."""
    user = _user(request)
    membership = _membership_or_404(request, "No such conversation.")
    if request.method == "GET":
        try:
            session = chat_sessions.session_get(
                user=user, session_id=session_id, tenant=membership.tenant
            )
        except Http404:  # an archived conversation lists its files too (read-only)
            session = chat_sessions.archived_session_get(user=user, session_id=session_id)
            if session.tenant_id != membership.tenant_id:
                raise
        documents = knowledge.session_attachments(session_id=session.id)
        return JsonResponse({"documents": [attachment_data(d) for d in documents]})
    session = chat_sessions.session_get(user=user, session_id=session_id, tenant=membership.tenant)
    upload = _uploaded_file(request)
    document = knowledge.attachment_upload(
        user=user, tenant=membership.tenant, session_id=session.id, upload=upload
    )
    return JsonResponse({"document": attachment_data(document)}, status=202)


@json_endpoint
@require_POST
def attachment_new_chat(request: HttpRequest) -> HttpResponse:
    """A file dropped on a new chat: a new, empty conversation titled after the file, with the
    file attached. Refused uploads leave no conversation behind."""
    user = _user(request)
    membership = _current_membership(request)
    if membership is None:
        return _json_error("no_tenant", "You are not a member of any active tenant.", 403)
    upload = _uploaded_file(request)
    with transaction.atomic():
        title = knowledge.title_from_filename(upload.filename)
        session = chat_sessions.session_create(user=user, tenant=membership.tenant, title=title)
        document = knowledge.attachment_upload(
            user=user, tenant=membership.tenant, session_id=session.id, upload=upload
        )
    return JsonResponse(
        {"session": session_data(session), "document": attachment_data(document)}, status=202
    )


@json_endpoint
@require_http_methods(["DELETE"])
def attachment(request: HttpRequest, document_id: uuid.UUID) -> HttpResponse:
    """Remove a file attached to one of the user's conversations, with its passages."""
    membership = _membership_or_404(request, "No such document.")
    document = knowledge.attachment_for_owner(
        user=_user(request), tenant=membership.tenant, document_id=document_id
    )
    public_id = document.public_id
    knowledge.document_delete(document=document)
    return JsonResponse({"deleted": True, "id": public_id})


@json_endpoint
@require_GET
def passage(request: HttpRequest, passage_id: int) -> HttpResponse:
    """A source's passage, whole: what the dialog under a reply shows, with where its document
    lives when it was synced (a page's URL, a file's path in the share). A passage of a
    document limited to groups the user is not in is a 404 like one that never existed."""
    membership = _membership_or_404(request, "No such passage.")
    chunk = knowledge.passage_for_user(
        user=_user(request), tenant=membership.tenant, passage_id=passage_id
    )
    document = chunk.document
    return JsonResponse(
        {
            "id": chunk.pk,
            "title": document.title,
            "where": chunk.where,
            "section": chunk.headings,
            "text": chunk.text,
            "document": {
                "id": document.public_id,
                "title": document.title,
                "filename": document.filename,
                "download_url": reverse("chat:document_file", args=[document.pk]),
                "origin": document.origin or None,
                "origin_url": document.origin
                if document.origin.startswith(("https://", "http://"))
                else None,
            },
        }
    )


@login_required
@require_GET
def document_file(request: HttpRequest, document_id: uuid.UUID) -> HttpResponse:
    """A document's file as uploaded, always as a download: an HTML document comes as plain
    text, never rendered as a page of this site."""
    membership = _membership_or_404(request, "No such document.")
    document = knowledge.document_for_user(
        user=_user(request), tenant=membership.tenant, document_id=document_id
    )
    response = HttpResponse(
        knowledge.document_data(document=document),
        content_type=knowledge.content_type(document.kind),
    )
    response["Content-Disposition"] = knowledge.content_disposition(document.filename)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


# --- favicon -------------------------------------------------------------------------------


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers and tools that ask for /favicon.ico by habit get the page's SVG icon."""
    return redirect(static("chat/favicon.svg"), permanent=True)


# --- tenant switch ---------------------------------------------------------------------------


@login_required
@require_POST
def tenant_switch(request: HttpRequest) -> HttpResponse:
    """Work in another of the user's tenants: the sidebar and new chats follow, and so does
    the websocket (it reads session["tenant"] when it connects)."""
    slug = request.POST.get("tenant", "")
    if not slug:
        return _json_error("invalid_tenant", "Choose a tenant.")
    membership = membership_for(user=_user(request), tenant_slug=slug)
    if membership is None:
        raise Http404("No such tenant.")
    request.session["tenant"] = membership.tenant.slug
    return redirect("chat:index")
