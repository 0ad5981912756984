"""Who may read conversations' text in the admin, and the record of every reading.

The rule (docs/privacy.md): nobody reads a conversation's text — its title, its messages — in
the admin unless the conversation's tenant has its content audit on. Then superusers and that
tenant's admins may, every reading (a conversation's page, a message's page, a search through
the text) leaves a ContentRead, and the tenant's members see a notice in the chat. Superusers
are no exception: switching the audit on is what lets anyone read, it is a superuser's act
recorded in the admin history, and it is shown to the people whose conversations it opens.

What is never content: who used qassist, when, with which key, how many tokens, how a reply
ended. The admin shows that to the tenant's admins at any time.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from chat.models import ChatSession, ContentRead, Message
from tenants.models import Tenant
from tenants.services import tenants_administered_by


def readable_tenants(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Tenant]:
    """The tenants whose conversations `user` may read in the admin: those with the content
    audit on, among all tenants for a superuser, among the ones they run for a tenant admin."""
    if not user.is_authenticated or not user.is_active:
        return Tenant.objects.none()
    if getattr(user, "is_superuser", False):
        return Tenant.objects.filter(content_audit=True)
    return tenants_administered_by(user=user).filter(content_audit=True)


def may_read(*, user: AbstractBaseUser | AnonymousUser, tenant_id: int) -> bool:
    return readable_tenants(user=user).filter(pk=tenant_id).exists()


def owner_name(session: ChatSession) -> str:
    """Whose a conversation is, as a content read names it."""
    if session.user is not None:
        return session.user.get_username()
    parts = []
    if session.api_key is not None:
        parts.append(f"API key {session.api_key.prefix}")
    if session.external_user:
        parts.append(f"for “{session.external_user}”")
    return " ".join(parts) or "—"


def content_read_record(
    *,
    reader: AbstractBaseUser,
    session: ChatSession,
    message: Message | None = None,
) -> ContentRead:
    """Log that `reader` was shown the text of `session` (or of one of its messages)."""
    return ContentRead.objects.create(
        reader_id=reader.pk,
        reader_name=reader.get_username(),
        tenant_id=session.tenant_id,
        kind=ContentRead.Kind.MESSAGE if message is not None else ContentRead.Kind.CONVERSATION,
        session_id=session.id,
        message_id=message.pk if message is not None else None,
        owner_name=owner_name(session),
    )


def content_search_record(
    *, reader: AbstractBaseUser, tenants: QuerySet[Tenant], query: str
) -> list[ContentRead]:
    """Log that `reader` searched the text of `tenants`' conversations for `query`."""
    return ContentRead.objects.bulk_create(
        ContentRead(
            reader_id=reader.pk,
            reader_name=reader.get_username(),
            tenant_id=tenant_id,
            kind=ContentRead.Kind.SEARCH,
            query=query[:200],
        )
        for tenant_id in tenants.values_list("id", flat=True)
    )
