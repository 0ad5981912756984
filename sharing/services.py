"""Business rules for exporting a conversation and sharing a snapshot of it with colleagues.

A share is the owner's choice to show a conversation to the other members of its tenant: a
read-only snapshot of the branch shown at that moment (later turns, edits and versions do not
reach it), opened by link by an active member of the same tenant — anyone else, another
tenant's member included, gets a 404 like a link that never existed. Its owner revokes it at
any time; deleting the conversation deletes its shares; an owner who leaves the tenant (or
whose account is switched off) takes their links with them. The admin never shows snapshots
(docs/privacy.md).

Documents limited to groups (knowledge.access) follow the one who opens the link: a source
they may not read is not listed (its name and quotes with it), and a reply that rests on one,
or comes after one in the conversation (the model had read it), shows that it is not theirs
to read instead of its text. The owner's own snapshot holds only what the owner could read
when sharing.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from chat.models import ChatSession, Message
from chat.services.branches import branch_data
from chat.services.checks import ChatError
from chat.services.sessions import session_create, session_get
from knowledge.access import reader_for_user
from knowledge.models import Document
from knowledge.turns import NONE_FOUND
from sharing.models import SharedConversation
from tenants.models import Tenant
from tenants.services import membership_for

MAX_SHARES_PER_CONVERSATION = 20


def _snapshot(session: ChatSession) -> list[dict[str, Any]]:
    """The branch shown, as the snapshot keeps it: finished messages only, each reply with the
    names of its sources, their passages and the sentences it quoted from the tenant's
    documents (never from a file attached to the conversation, which a colleague may not
    read), its support check's verdict and the claims it warned about."""
    kept = []
    branch = branch_data(session=session)
    audiences = _audiences([s.get("document_id") for m in branch for s in m.get("sources") or []])
    for m in branch:
        if m["status"] == Message.Status.STREAMING or (
            m["role"] == Message.Role.ASSISTANT and not m["content"]
        ):
            continue
        kept.append(
            {
                "role": m["role"],
                "content": m["content"],
                "created_at": m["created_at"],
                "verdict": m.get("verdict", ""),
                "grounding": m.get("grounding", ""),
                "sources": [
                    {
                        "number": s["number"],
                        "title": s["title"],
                        "where": s["where"],
                        "cited": s["cited"],
                        "quotes": [q["text"] for q in s.get("quotes") or []]
                        if _shared_document(s.get("document_id"))
                        else [],
                        "document_id": s.get("document_id"),
                        # Opened from the snapshot through the reader's own access (the
                        # passage endpoint's rule); an attachment's passage never.
                        "passage_id": s.get("passage_id")
                        if _shared_document(s.get("document_id"))
                        else None,
                        "audience": audiences.get(str(s.get("document_id")), ""),
                    }
                    for s in m.get("sources") or []
                ],
            }
        )
    return kept


# Said under a reply whose question the documents had nothing on, as the chat says it.
NOT_FROM_DOCUMENTS = "Not from the company’s documents: they had nothing on this question."


def with_notes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each reply marked `not_from_documents` when its question found nothing in the
    documents (the question's `grounding`, kept in every snapshot): the chat shows the note
    under such a reply, and a snapshot or an export dropped it (issue #31)."""
    out = []
    question_grounding = ""
    for message in messages:
        if message.get("role") == Message.Role.USER:
            question_grounding = message.get("grounding") or ""
            out.append(message)
        else:
            out.append({**message, "not_from_documents": question_grounding == NONE_FOUND})
    return out


def _document_key(document_id: object) -> uuid.UUID | None:
    if not isinstance(document_id, str) or not document_id.startswith("doc-"):
        return None
    try:
        return uuid.UUID(document_id.removeprefix("doc-"))
    except ValueError:
        return None


def _audiences(document_ids: list[object]) -> dict[str, str]:
    """Each document's audience (who may read it) now, by public id."""
    keys = {k for k in map(_document_key, document_ids) if k is not None}
    return {
        f"doc-{pk.hex}": audience
        for pk, audience in Document.objects.filter(id__in=keys).values_list("id", "audience")
    }


def messages_for_viewer(*, share: SharedConversation, user: User) -> list[dict[str, Any]]:
    """The snapshot as `user` may read it: sources of documents limited to groups they are
    not in are left out, and from the first reply that rests on one, the replies' text is
    withheld (each later reply was written with that passage in the model's view)."""
    reader = reader_for_user(user=user, tenant=share.tenant_id)
    current = _audiences(
        [s.get("document_id") for m in share.messages for s in m.get("sources") or []]
    )
    out: list[dict[str, Any]] = []
    tainted = False
    for message in share.messages:
        sources = message.get("sources") or []
        allowed = []
        for source in sources:
            audience = current.get(str(source.get("document_id")), source.get("audience") or "")
            if reader.may_read(audience):
                allowed.append({k: v for k, v in source.items() if k != "audience"})
            else:
                tainted = True
        shown = {**message, "sources": allowed}
        if tainted and message.get("role") == Message.Role.ASSISTANT:
            shown.update(content="", withheld=True, sources=[])
        out.append(shown)
    return with_notes(out)


def _shared_document(document_id: object) -> bool:
    """A document of the tenant's knowledge base, not a conversation's attachment."""
    if not isinstance(document_id, str) or not document_id.startswith("doc-"):
        return False
    try:
        key = uuid.UUID(document_id.removeprefix("doc-"))
    except ValueError:
        return False
    return Document.objects.filter(id=key, session__isnull=True).exists()


@transaction.atomic
def share_create(*, user: User, tenant: Tenant, session_id: uuid.UUID) -> SharedConversation:
    """A new snapshot link of the user's own live conversation, as it is now."""
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    messages = _snapshot(session)
    if not messages:
        raise ChatError("nothing_to_share", "There is nothing in this conversation yet.")
    live = SharedConversation.objects.filter(session=session, revoked_at__isnull=True)
    if live.count() >= MAX_SHARES_PER_CONVERSATION:
        raise ChatError(
            "too_many_shares",
            f"This conversation has {MAX_SHARES_PER_CONVERSATION} links already: revoke one.",
        )
    return SharedConversation.objects.create(
        tenant=session.tenant,
        session=session,
        shared_by=user,
        title=session.title,
        messages=messages,
    )


def shares_of(*, user: User, tenant: Tenant, session_id: uuid.UUID) -> list[SharedConversation]:
    """The links of the user's own conversation that still open, newest first."""
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    return list(SharedConversation.objects.filter(session=session, revoked_at__isnull=True))


def share_revoke(*, user: User, share_id: uuid.UUID) -> SharedConversation:
    """Close a link the user made; from now on it is a 404 for everyone."""
    share = SharedConversation.objects.filter(id=share_id, shared_by=user).first()
    if share is None:
        raise Http404("No such link.")
    if share.revoked_at is None:
        share.revoked_at = timezone.now()
        share.save(update_fields=["revoked_at"])
    return share


def share_for_viewer(*, user: User, share_id: uuid.UUID) -> SharedConversation:
    """A snapshot the user may read: not revoked, of a tenant they are an active member of
    (an active tenant), shared by someone who still is one. A departed member cannot revoke
    their links any more (they cannot sign in), so the links close when they leave, and open
    again if they come back. Anything else is a 404, never a 403."""
    share = (
        SharedConversation.objects.select_related("tenant", "shared_by")
        .filter(id=share_id, revoked_at__isnull=True, tenant__active=True)
        .first()
    )
    if (
        share is None
        or membership_for(user=user, tenant_slug=share.tenant.slug) is None
        or not share.shared_by.is_active
        or membership_for(user=share.shared_by, tenant_slug=share.tenant.slug) is None
    ):
        raise Http404("No such conversation.")
    return share


@transaction.atomic
def share_continue(*, user: User, share_id: uuid.UUID) -> ChatSession:
    """ "Continue in my chats": a copy of the snapshot, as `user` may read it, in their own
    history in the snapshot's tenant, ready for their next question (issue #31: a shared
    snapshot was a dead end). The text is copied, not the passages: the next question finds
    its own, with the reader's access to documents. The copy ends before the first reply
    withheld from them (it, and every later reply, rests on a passage they may not read),
    and always with a reply: a question left without its answer is not copied."""
    share = share_for_viewer(user=user, share_id=share_id)
    shown = messages_for_viewer(share=share, user=user)
    kept: list[dict[str, Any]] = []
    for message in shown:
        if message.get("withheld"):
            break
        kept.append(message)
    while kept and kept[-1].get("role") != Message.Role.ASSISTANT:
        kept.pop()
    if not kept:
        raise ChatError("nothing_to_continue", "There is nothing in this snapshot to continue.")
    session = session_create(user=user, tenant=share.tenant, title=share.title)
    parent: Message | None = None
    for message in kept:
        question = message.get("role") == Message.Role.USER
        parent = Message.objects.create(
            session=session,
            parent=parent,
            role=Message.Role.USER if question else Message.Role.ASSISTANT,
            content=message.get("content") or "",
            status=Message.Status.COMPLETE,
            finish_reason="" if question else "stop",
            grounding=(message.get("grounding") or "") if question else "",
        )
    session.branch_tip = parent
    session.save(update_fields=["branch_tip"])
    return session


# --- Markdown export --------------------------------------------------------------------------


def conversation_markdown(*, session: ChatSession) -> str:
    """The branch shown as a Markdown file: the title, when and where it was exported, then
    each message under its speaker, each reply followed by its sources."""
    lines = [
        f"# {session.title or 'New chat'}",
        "",
        f"Exported from qassist ({session.tenant.name}) on "
        f"{timezone.localtime():%Y-%m-%d %H:%M %Z}.",
        "",
    ]
    for m in with_notes(_snapshot(session)):
        speaker = "You" if m["role"] == Message.Role.USER else "qassist"
        lines += [f"## {speaker}", "", m["content"].strip(), ""]
        if m.get("not_from_documents"):
            lines += [f"*{NOT_FROM_DOCUMENTS}*", ""]
        if m["sources"]:
            lines.append("Sources:")
            for s in m["sources"]:
                lines.append(
                    f"- [{s['number']}] {s['title']}" + (f", {s['where']}" if s["where"] else "")
                )
                lines += [f"  > {quote}" for quote in s.get("quotes") or []]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def export_filename(session: ChatSession) -> str:
    """The title as a file name: characters no file system takes become "_"."""
    name = re.sub(r'[\\/:*?"<>|\x00-\x1f]+', "_", session.title or "").strip(" .")
    return (name or "conversation")[:80] + ".md"
