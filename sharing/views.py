"""Export and share (docs/ui.md):

    GET  /c/<id>/export.md            the conversation (its branch shown) as a Markdown file
    POST /sessions/<id>/share         a new read-only snapshot link: 201 {share}
    GET  /sessions/<id>/shares        the conversation's links that still open: {shares}
    POST /shares/<id>/revoke          close a link: {share}
    GET  /s/<id>/                     the snapshot, for an active member of its tenant
    POST /s/<id>/continue             a copy in the reader's own chats: a redirect to it

Someone else's conversation, another tenant's snapshot or a revoked link is a 404.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from chat.services.checks import ChatError
from chat.services.sessions import archived_session_get, session_get
from chat.views import _current_membership, _user, json_endpoint
from knowledge.services import content_disposition
from sharing import services
from sharing.models import SharedConversation


def share_data(share: SharedConversation) -> dict[str, Any]:
    return {
        "id": str(share.id),
        "url": reverse("sharing:shared", args=[share.id]),
        "created_at": share.created_at.isoformat(),
        "shared_by": share.shared_by.get_username(),
        "revoked": share.revoked_at is not None,
        "messages": len(share.messages),
    }


def _tenant(request: HttpRequest) -> Any:
    membership = _current_membership(request)
    if membership is None:
        raise Http404("No such conversation.")
    return membership.tenant


@login_required
@require_GET
def export_markdown(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """The conversation as the page shows it, as Markdown (an archived one too)."""
    user = _user(request)
    try:
        session = session_get(user=user, session_id=session_id)
    except Http404:
        session = archived_session_get(user=user, session_id=session_id)
    response = HttpResponse(
        services.conversation_markdown(session=session),
        content_type="text/markdown; charset=utf-8",
    )
    response["Content-Disposition"] = content_disposition(services.export_filename(session))
    response["X-Content-Type-Options"] = "nosniff"
    return response


@json_endpoint
@require_POST
def share_create(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    share = services.share_create(
        user=_user(request), tenant=_tenant(request), session_id=session_id
    )
    return JsonResponse({"share": share_data(share)}, status=201)


@json_endpoint
@require_GET
def share_list(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    shares = services.shares_of(user=_user(request), tenant=_tenant(request), session_id=session_id)
    return JsonResponse({"shares": [share_data(s) for s in shares]})


@json_endpoint
@require_POST
def share_revoke(request: HttpRequest, share_id: uuid.UUID) -> HttpResponse:
    share = services.share_revoke(user=_user(request), share_id=share_id)
    return JsonResponse({"share": share_data(share)})


@login_required
@require_GET
def shared(request: HttpRequest, share_id: uuid.UUID) -> HttpResponse:
    """A snapshot, read-only, saying who shared it and when."""
    user = _user(request)
    share = services.share_for_viewer(user=user, share_id=share_id)
    messages = services.messages_for_viewer(share=share, user=user)
    return render(request, "sharing/shared.html", {"share": share, "messages": messages})


@login_required
@require_POST
def share_continue(request: HttpRequest, share_id: uuid.UUID) -> HttpResponse:
    """Continue a snapshot in one's own chats: the copy opens, ready for the next question."""
    try:
        session = services.share_continue(user=_user(request), share_id=share_id)
    except ChatError as error:
        return HttpResponse(error.message, status=400, content_type="text/plain; charset=utf-8")
    return redirect("chat:conversation", session_id=session.id)
