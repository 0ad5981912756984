"""The chat UI: two pages (a new chat, a conversation) and the small JSON endpoints the page
calls (sidebar search, rename, archive, restore, delete, reload a conversation's messages).

Replies themselves stream over the websocket (chat/consumers.py, docs/websocket.md). Someone
else's session is a 404; an archived one opens read-only, where it can be restored or deleted.
JSON endpoints answer bad input with a 400 and `{"error": {"code", "message"}}`, and an
anonymous caller with a 401 instead of a redirect.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from chat import admission, services
from chat.models import ChatSession
from chat.services import ChatError
from qassist.errors import json_error
from tenants.models import Membership
from tenants.services import membership_for, tenants_for_user

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
        except Http404:
            return _json_error("not_found", "No such conversation.", status=404)
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
    return services.session_get(user=_user(request), session_id=session_id)


def _payload(request: HttpRequest) -> dict[str, Any]:
    """A JSON object body, or the form fields of a form POST."""
    if request.content_type != "application/json":
        return request.POST.dict()
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("bad_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest("bad_json", "The request body must be a JSON object.")
    return data


def session_data(session: ChatSession) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "title": session.title,
        "updated_at": session.updated_at.isoformat(),
        "archived": session.archived,
    }


def _visible_messages(session: ChatSession) -> list[dict[str, Any]]:
    return services.branch_data(session=session)


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
        session = services.archived_session_get(user=_user(request), session_id=session_id)
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
    sessions = services.sessions_for_user(user=user, tenant=membership.tenant)
    page_data = {
        "session": session_data(session) if session is not None else None,
        "messages": _visible_messages(session) if session is not None else [],
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
            "login": reverse("login"),
        },
        "placeholderId": str(PLACEHOLDER_ID),
        "maxMessageChars": services.MAX_MESSAGE_CHARS,
    }
    context = {
        "session": session,
        "sessions": sessions[:SIDEBAR_SESSIONS],
        "tenant": membership.tenant,
        "tenants": list(tenants_for_user(user=user)),
        "page_data": page_data,
    }
    return render(request, "chat/chat.html", context)


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
    sessions = services.sessions_for_user(
        user=_user(request), tenant=membership.tenant, query=query, archived=archived
    )
    return JsonResponse({"sessions": [session_data(s) for s in sessions[:SIDEBAR_SESSIONS]]})


@json_endpoint
@require_GET
def session_messages(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """The stored messages: what the page redraws after a reconnect (an interrupted reply shows
    the part already generated)."""
    session = _own_session(request, session_id)
    return JsonResponse({"session": session_data(session), "messages": _visible_messages(session)})


@json_endpoint
@require_POST
def session_rename(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = _own_session(request, session_id)
    title = _payload(request).get("title")
    if not isinstance(title, str):
        raise BadRequest("invalid_title", "Give the new title as text.")
    if len(title.strip()) > MAX_TITLE_CHARS:
        raise BadRequest("invalid_title", f"A title holds at most {MAX_TITLE_CHARS} characters.")
    session = services.session_rename(session=session, title=title)
    return JsonResponse({"session": session_data(session)})


@json_endpoint
@require_POST
def session_archive(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = _own_session(request, session_id)
    services.session_archive(session=session)
    return JsonResponse({"archived": True, "id": str(session.id)})


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
    session_id = services.check_session_id(payload.get("session"))
    in_session, alone = services.draft_conversations(
        user=_user(request), tenant=membership.tenant, session_id=session_id, content=content
    )
    try:
        room = admission.measure(in_session)
        fits_alone = room.fits if session_id is None else admission.measure(alone).fits
    except FileNotFoundError:  # no model (so no vocabulary) on this server: nothing to count
        return _json_error("worker_down", "The model is not installed on this server.", 503)
    message_ok = len(content) <= services.MAX_MESSAGE_CHARS
    return JsonResponse(
        {
            "tokens": room.tokens,
            "token_limit": room.token_limit,
            "chars": room.chars,
            "char_limit": room.char_limit,
            "message_chars": len(content),
            "message_char_limit": services.MAX_MESSAGE_CHARS,
            "fits": room.fits and message_ok,
            "fits_alone": fits_alone and message_ok,
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
    session = services.branch_switch(
        user=_user(request),
        tenant=membership.tenant,
        session_id=session_id,
        message_id=_payload(request).get("message"),
    )
    return JsonResponse({"session": session_data(session), "messages": _visible_messages(session)})


@json_endpoint
@require_POST
def session_restore(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    session = services.archived_session_get(user=_user(request), session_id=session_id)
    session = services.session_restore(session=session)
    return JsonResponse({"session": session_data(session)})


@json_endpoint
@require_POST
def session_delete(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """Delete an archived conversation and its messages for good (the page asked first)."""
    session = services.archived_session_get(user=_user(request), session_id=session_id)
    messages = services.session_delete(session=session)
    return JsonResponse({"deleted": True, "id": str(session_id), "messages": messages})


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
