"""A person's conversations: the sidebar's list, the one lookup behind every read of their own
session, create, rename, pin, archive, restore and delete."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.http import Http404
from django.utils import timezone

from chat.models import ChatSession
from chat.services.checks import ChatError
from chat.services.replies import no_reply_in_progress
from tenants.models import Tenant


def sessions_for_user(
    *, user: User, tenant: Tenant, query: str = "", archived: bool = False
) -> Any:
    """The sidebar's list: the user's live sessions in `tenant`, pinned ones first (the latest
    pin first), then newest first; or their archived ones, newest first."""
    sessions = ChatSession.objects.filter(user=user, tenant=tenant, archived=archived)
    if query:
        sessions = sessions.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).distinct()
    if archived:
        return sessions.order_by("-updated_at")
    return sessions.order_by(F("pinned_at").desc(nulls_last=True), "-updated_at")


def _own_session(
    *, user: User, session_id: uuid.UUID | str, archived: bool, tenant: Tenant | None = None
) -> ChatSession:
    """The user's own session, in a tenant they still belong to that is active (and in
    `tenant`, when given); else a 404, never a 403 (no existence leak)."""
    try:
        sessions = ChatSession.objects.select_related("tenant").filter(
            id=session_id,
            user=user,
            archived=archived,
            tenant__active=True,
            tenant__memberships__user=user,
        )
        if tenant is not None:
            sessions = sessions.filter(tenant=tenant)
        return sessions.get()
    except (ChatSession.DoesNotExist, ValueError, ValidationError):
        raise Http404("No such conversation.") from None


def session_get(
    *, user: User, session_id: uuid.UUID | str, tenant: Tenant | None = None
) -> ChatSession:
    """The user's own live session, in a tenant they still belong to (and in `tenant`, when
    given). Anyone else's, an archived one, or one of a tenant the user left or that was
    deactivated is a 404, never a 403 (no existence leak)."""
    return _own_session(user=user, session_id=session_id, archived=False, tenant=tenant)


def session_create(*, user: User, tenant: Tenant, title: str = "") -> ChatSession:
    return ChatSession.objects.create(user=user, tenant=tenant, title=title[:200])


def session_rename(*, session: ChatSession, title: str) -> ChatSession:
    title = title.strip()
    if not title:
        raise ChatError("invalid_title", "A title cannot be empty.")
    session.title = title[:200]
    session.save(update_fields=["title"])
    return session


def session_archive(*, session: ChatSession) -> None:
    session.archived = True
    session.save(update_fields=["archived"])


def session_pin(*, session: ChatSession, pinned: bool) -> ChatSession:
    """Pin a live conversation to the top of its owner's list, or unpin it."""
    if pinned and session.pinned_at is None:
        session.pinned_at = timezone.now()
    elif not pinned:
        session.pinned_at = None
    session.save(update_fields=["pinned_at"])
    return session


def check_pinned(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ChatError("invalid_pinned", "Say `pinned` as true or false.")
    return raw


def archived_session_get(*, user: User, session_id: uuid.UUID | str) -> ChatSession:
    """The user's own archived session, in a tenant they are still an active member of: the one
    lookup behind reading, restoring and deleting archived conversations. Anything else is a
    404 (no existence leak)."""
    return _own_session(user=user, session_id=session_id, archived=True)


def session_restore(*, session: ChatSession) -> ChatSession:
    """Back among the live sessions, where it was in the order of last use."""
    session.archived = False
    session.save(update_fields=["archived"])
    return session


@transaction.atomic
def session_delete(*, session: ChatSession) -> int:
    """Delete an archived session for good, its messages with it (usage records stay, without
    the link, for the tenant's accounting). Returns how many messages went."""
    if not session.archived:
        raise ChatError("not_archived", "Archive a conversation before deleting it.")
    no_reply_in_progress(session)
    _, by_model = session.delete()
    return by_model.get("chat.Message", 0)
