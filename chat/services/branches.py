"""Branches: the versions of regenerated replies and edited messages, the branch a session
shows, and switching to another version."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from chat.models import ChatSession, Message
from chat.services.checks import ChatError
from chat.services.replies import message_data, no_reply_in_progress
from chat.services.sessions import session_get
from knowledge import turns as knowledge
from knowledge.access import reader_for_session
from tenants.models import Tenant


def branch_messages(*, session: ChatSession) -> list[Message]:
    """The messages of the branch the session shows, first to last: from its tip up through
    each message's parent. Earlier versions (siblings off this path) are not in it."""
    if session.branch_tip_id is None:
        # Messages stored without versions (fixtures, imports): one straight line.
        return list(session.messages.order_by("created_at", "id"))
    by_id = {m.id: m for m in session.messages.all()}
    tip = by_id.get(session.branch_tip_id)
    path: list[Message] = []
    node: Message | None = tip
    while node is not None and len(path) <= len(by_id):
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    return path


def chain_straight(session: ChatSession) -> None:
    """Give a session stored without versions its parent links and tip, oldest to newest, so
    versions can grow from it."""
    if session.branch_tip_id is not None:
        return
    previous: int | None = None
    for message in session.messages.order_by("created_at", "id"):
        if message.parent_id != previous:
            Message.objects.filter(id=message.id).update(parent_id=previous)
        previous = message.id
    if previous is not None:
        session.branch_tip_id = previous
        session.save(update_fields=["branch_tip"])


def versions_of(*, session: ChatSession) -> dict[int | None, list[int]]:
    """Each parent's children, oldest first: the versions of the turn that follows it."""
    children: dict[int | None, list[int]] = {}
    for message_id, parent_id in session.messages.order_by("id").values_list("id", "parent_id"):
        children.setdefault(parent_id, []).append(message_id)
    return children


def branch_data(*, session: ChatSession) -> list[dict[str, Any]]:
    """The shown branch as message objects, each with the ids of its versions."""
    if session.branch_tip_id is None:
        return [
            message_data(m, versions=[m.id])
            for m in branch_messages(session=session)
            if m.role != Message.Role.SYSTEM
        ]
    children = versions_of(session=session)
    messages = branch_messages(session=session)
    passages = knowledge.branch_passages(
        [m.parent_id for m in messages if m.role == Message.Role.ASSISTANT and m.parent_id],
        reader=reader_for_session(session),
    )
    return [
        message_data(
            m,
            versions=children.get(m.parent_id, [m.id]),
            sources=knowledge.sources_of(
                passages.get(m.parent_id or 0, []), reply_text=m.content, evidence=m.evidence
            ),
        )
        for m in messages
        if m.role != Message.Role.SYSTEM
    ]


@transaction.atomic
def branch_switch(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, message_id: Any
) -> ChatSession:
    """Show another version of a message: the branch then runs through it and on down the
    newest conversation that followed it. Nothing is deleted."""
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    session = ChatSession.objects.select_for_update().select_related("tenant").get(id=session.id)
    no_reply_in_progress(session)
    chain_straight(session)
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise ChatError("not_found", "No such message in this conversation.")
    if not session.messages.filter(id=message_id).exists():
        raise ChatError("not_found", "No such message in this conversation.")
    children = versions_of(session=session)
    node = message_id
    while children.get(node):
        node = children[node][-1]
    session.branch_tip_id = node
    session.save(update_fields=["branch_tip"])
    return session
