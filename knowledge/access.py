"""Who may read which of a tenant's documents: the rule every surface applies.

A document (uploaded or synced) is open to everyone in its tenant, or limited to some of the
tenant's groups (`tenants.TenantGroup`). Its *audience* says which, as one string copied to
its passages (`Chunk.audience`) and to the passages a question was given (`Passage.audience`):

    ""          everyone in the tenant
    "g:3,7"     the members of groups 3 and 7
    "g:"        nobody (it was limited to groups that were deleted since): staff choose again

A *reader* is who asks: a member (their groups in the tenant), an API key (its scope), or
everyone (internal work that shows nobody anything). Retrieval (`knowledge.index`, full text
and vectors alike) keeps only the audiences `readable_audiences` returns; every other surface
that shows a passage, a source's name or a quote (the chat, REST, cached replies, shared
snapshots, the feedback page, the passage view) asks `Reader.may_read`. What a reader may not
read is absent, as if it did not exist: a 404, never a refusal that names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    from tenants.models import ApiKey, Tenant
    from tenants.services import Principal

EVERYONE = ""
_PREFIX = "g:"


def audience_key(group_ids: Iterable[int], *, limited: bool) -> str:
    """The audience of a document limited (or not) to `group_ids`."""
    if not limited:
        return EVERYONE
    return _PREFIX + ",".join(str(g) for g in sorted(set(group_ids)))


def audience_groups(audience: str) -> frozenset[int] | None:
    """The groups an audience names; None for everyone."""
    if not audience:
        return None
    return frozenset(int(g) for g in audience.removeprefix(_PREFIX).split(",") if g)


@dataclass(frozen=True)
class Reader:
    """Who reads: `groups` are the tenant groups they are in; None reads every document."""

    groups: frozenset[int] | None

    def may_read(self, audience: str) -> bool:
        if not audience or self.groups is None:
            return True
        named = audience_groups(audience)
        return bool(named and named & self.groups)

    @property
    def reads_everything(self) -> bool:
        return self.groups is None


# Internal work that shows nobody a passage (re-indexing, benchmarks of the whole corpus).
ALL = Reader(None)
# Who is not known to be in any group: the documents open to everyone. The default wherever a
# reader is not given, so that a caller who forgets one never shows a limited document.
PUBLIC = Reader(frozenset())


def reader_for_user(
    *, user: AbstractBaseUser | AnonymousUser | None, tenant: Tenant | int
) -> Reader:
    """A member's reader in `tenant`: their groups there (staff and superusers included: the
    admin manages documents, the chat reads them like anyone)."""
    from tenants.models import TenantGroup

    if user is None or not user.is_authenticated or not user.is_active:
        return PUBLIC
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    ids = TenantGroup.objects.filter(tenant_id=tenant_id, group__user__pk=user.pk).values_list(
        "id", flat=True
    )
    return Reader(frozenset(ids))


def reader_for_api_key(*, api_key: ApiKey) -> Reader:
    from tenants.models import ApiKey as Key

    if api_key.document_scope == Key.Scope.ALL:
        return ALL
    return Reader(
        frozenset(api_key.groups.filter(tenant_id=api_key.tenant_id).values_list("id", flat=True))
    )


def reader_for_principal(principal: Principal) -> Reader:
    """Whoever a request runs as: an API key's scope, or the member's groups."""
    if principal.api_key is not None:
        return reader_for_api_key(api_key=principal.api_key)
    return reader_for_user(user=principal.user, tenant=principal.tenant)


def reader_for_session(session: Any) -> Reader:
    """The reader of a conversation's owner: its API key, or its person (chat.ChatSession)."""
    if session.api_key_id is not None:
        return reader_for_api_key(api_key=session.api_key)
    return reader_for_user(user=session.user, tenant=session.tenant_id)


def readable_audiences(*, tenant_id: int, reader: Reader) -> list[str] | None:
    """The audiences of the tenant's passages that `reader` may read; None: all of them. The
    one decision both indexes apply (knowledge.index: an SQL `IN`, a mask over the vectors)."""
    if reader.reads_everything:
        return None
    if not reader.groups:
        return [EVERYONE]
    from knowledge.models import Document

    present = (
        Document.objects.filter(tenant_id=tenant_id)
        .exclude(audience=EVERYONE)
        .order_by()
        .values_list("audience", flat=True)
        .distinct()
    )
    return [EVERYONE, *(a for a in present if reader.may_read(a))]


def audience_filter(*, tenant_id: int, reader: Reader, field: str = "audience") -> Q:
    """A queryset filter on `field` (a document's or a passage's audience) by
    `readable_audiences`: what the ORM's callers use, the indexes' own SQL aside."""
    audiences = readable_audiences(tenant_id=tenant_id, reader=reader)
    return Q() if audiences is None else Q(**{f"{field}__in": audiences})


def may_read_passage(reader: Reader, passage: Any) -> bool:
    """Whether `reader` may see a passage a question was given (knowledge.Passage): its
    document's audience as it is now, or, once the document is gone, as it was then."""
    document = passage.document if passage.document_id is not None else None
    audience = document.audience if document is not None else passage.audience
    return reader.may_read(audience)
