"""Business rules of single sign-on: who a signed-in person is in qassist, which tenants their
groups give them, how long a session goes on before the provider must vouch for it again, and
what happens when it no longer does.

Views, the session middleware and the chat websocket call these; signin/oidc.py does the
talking to the provider.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import import_module
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from qassist import sealing
from signin import oidc
from signin.errors import SignInError
from signin.models import GroupMapping, Identity, ProviderSession, TenantGroupMapping
from tenants.models import ApiKey, Membership, TenantGroup
from tenants.services import api_key_revoke

logger = logging.getLogger(__name__)

# Set in the login sessions that came from the provider: only those are ever re-checked.
SESSION_FLAG = "signin_provider"
RecheckOutcome = Literal["fresh", "renewed", "ended", "unavailable"]
# A process renewing a session holds it this long at most (a provider timing out included).
RENEW_LEASE = timedelta(seconds=60)
# While the provider cannot be reached, a session is re-tried this often.
RETRY_AFTER_OUTAGE = timedelta(seconds=60)
_USERNAME_RE = re.compile(r"[^\w.@+-]")
_ROLE_RANK = {str(Membership.Role.MEMBER.value): 0, str(Membership.Role.ADMIN.value): 1}


def provider_name() -> str:
    return str(settings.QASSIST_OIDC_NAME)


def check_next(*, url: str | None, host: str, secure: bool) -> str | None:
    """`url` if it is a path on this site (where to go after signing in), else None."""
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={host}, require_https=secure):
        return url
    return None


# --- who the person is -----------------------------------------------------------------------


@dataclass
class MembershipChanges:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def claims_groups(*, claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of names (a provider may send one group as a string)."""
    raw = claims.get(settings.QASSIST_OIDC_GROUPS_CLAIM)
    if isinstance(raw, str):
        return [raw] if raw else []
    if isinstance(raw, list):
        return [str(group) for group in raw if isinstance(group, str | int)]
    return []


def identity_sign_in(*, issuer: str, claims: dict[str, Any]) -> User:
    """The qassist account of the person the provider signed in, created on their first
    sign-in, always found by (issuer, sub): an account with the same username or e-mail that
    did not come from this provider is never taken over. Their memberships follow the groups."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SignInError("invalid_token", "the ID token has no subject")
    try:
        with transaction.atomic():
            return _sign_in(issuer=issuer, subject=subject, claims=claims)
    except IntegrityError:  # the same person's first sign-in in two tabs at once
        with transaction.atomic():
            return _sign_in(issuer=issuer, subject=subject, claims=claims)


def _sign_in(*, issuer: str, subject: str, claims: dict[str, Any]) -> User:
    identity = (
        Identity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    now = timezone.now()
    if identity is None:
        user = User(username=_free_username(claims=claims, subject=subject))
        user.set_unusable_password()
        _copy_profile(user=user, claims=claims)
        user.save()
        identity = Identity.objects.create(user=user, issuer=issuer, subject=subject)
        logger.info("single sign-on: created %s for %s at %s", user.username, subject, issuer)
    else:
        user = identity.user
        if not user.is_active:
            if identity.refused_at is None:
                raise SignInError("account_disabled", f"{user.username} is switched off")
            # The provider vouches again for someone it had refused: they may come back.
            user.is_active = True
            identity.refused_at = None
            logger.info("single sign-on: %s is active again", user.username)
        _copy_profile(user=user, claims=claims)
        user.save()
    identity_apply_claims(identity=identity, claims=claims, now=now)
    return user


def _copy_profile(*, user: User, claims: dict[str, Any]) -> None:
    user.email = str(claims.get("email") or user.email)[:254]
    user.first_name = str(claims.get("given_name") or user.first_name)[:150]
    user.last_name = str(claims.get("family_name") or user.last_name)[:150]
    if not user.first_name and not user.last_name and claims.get("name"):
        user.first_name = str(claims["name"])[:150]


def _free_username(*, claims: dict[str, Any], subject: str) -> str:
    """The provider's username (or e-mail, or subject), made a valid Django username and
    suffixed where another account already has it."""
    wanted = ""
    for claim in (settings.QASSIST_OIDC_USERNAME_CLAIM, "preferred_username", "email"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            wanted = value.strip()
            break
    base = _USERNAME_RE.sub("-", wanted or subject)[:140] or "user"
    candidate, number = base, 1
    while User.objects.filter(username__iexact=candidate).exists():
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def identity_apply_claims(
    *, identity: Identity, claims: dict[str, Any], now: datetime | None = None
) -> MembershipChanges:
    """Record what the provider said of the person (now), and give them the tenants their
    groups map to."""
    groups = claims_groups(claims=claims)
    identity.groups = groups
    identity.email = str(claims.get("email") or identity.email)[:254]
    identity.last_checked_at = now or timezone.now()
    changes = memberships_apply(identity=identity, groups=groups)
    identity.save()
    return changes


def memberships_apply(*, identity: Identity, groups: list[str]) -> MembershipChanges:
    """Membership in every tenant that has group mappings is what the mappings say for
    `groups`: added, given the highest role any of the groups maps to, or removed. Tenants
    without mappings are left to staff. The account is staff while it administers a tenant
    through its groups (and only loses staff status the mapping gave it)."""
    user = identity.user
    mappings = list(GroupMapping.objects.select_related("tenant"))
    managed = {mapping.tenant_id: mapping.tenant for mapping in mappings}
    wanted: dict[int, str] = {}  # tenant id -> the highest role any of the groups maps to
    for mapping in mappings:
        if mapping.group not in groups:
            continue
        current = wanted.get(mapping.tenant_id)
        if current is None or _ROLE_RANK[mapping.role] > _ROLE_RANK[current]:
            wanted[mapping.tenant_id] = mapping.role
    changes = MembershipChanges()
    existing = Membership.objects.filter(user=user, tenant_id__in=list(managed))
    for membership in existing:
        slug = managed[membership.tenant_id].slug
        role = wanted.pop(membership.tenant_id, None)
        if role is None:
            membership.delete()
            changes.removed.append(slug)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
            changes.changed.append(f"{slug}:{role}")
    for tenant_id, role in wanted.items():
        Membership.objects.create(user=user, tenant_id=tenant_id, role=role)
        changes.added.append(f"{managed[tenant_id].slug}:{role}")
    _apply_staff(identity=identity)
    tenant_groups_apply(identity=identity, groups=groups, changes=changes)
    if changes:
        logger.info(
            "single sign-on: %s's memberships from groups %s: added %s, removed %s, changed %s",
            user.username,
            groups,
            changes.added,
            changes.removed,
            changes.changed,
        )
    return changes


def tenant_groups_apply(
    *, identity: Identity, groups: list[str], changes: MembershipChanges | None = None
) -> MembershipChanges:
    """Membership in every tenant group that has mappings is what they say for `groups`,
    within the tenants the person is a member of (a group is inside its tenant); groups
    without mappings are left to staff. The next question already reads with the new groups
    (knowledge.access), a conversation going on included."""
    changes = changes if changes is not None else MembershipChanges()
    user = identity.user
    mappings = list(TenantGroupMapping.objects.select_related("tenant_group__tenant"))
    managed = {m.tenant_group_id: m.tenant_group for m in mappings}
    member_of = set(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))
    wanted = {
        m.tenant_group_id
        for m in mappings
        if m.group in groups and m.tenant_group.tenant_id in member_of
    }
    current = set(
        TenantGroup.objects.filter(id__in=list(managed), group__user=user).values_list(
            "id", flat=True
        )
    )
    for group_id in current - wanted:
        user.groups.remove(managed[group_id].group_id)
        changes.removed.append(f"{managed[group_id].tenant.slug}/{managed[group_id].name}")
    for group_id in wanted - current:
        user.groups.add(managed[group_id].group_id)
        changes.added.append(f"{managed[group_id].tenant.slug}/{managed[group_id].name}")
    return changes


def _apply_staff(*, identity: Identity) -> None:
    user = identity.user
    administers = Membership.objects.filter(user=user, role=Membership.Role.ADMIN).exists()
    if administers and not user.is_staff:
        user.is_staff = True
        identity.staff_from_groups = True
        user.save(update_fields=["is_staff"])
    elif not administers and identity.staff_from_groups:
        identity.staff_from_groups = False
        if user.is_staff and not user.is_superuser:
            user.is_staff = False
            user.save(update_fields=["is_staff"])


# --- sessions that must be re-checked with the provider -------------------------------------


# A key of its own, derived from SECRET_KEY (qassist.sealing): a database dump alone does not
# hold usable refresh tokens.
_PURPOSE = "qassist.signin.refresh"


def _seal(token: str | None) -> str:
    return sealing.seal(token, purpose=_PURPOSE)


def _unseal(sealed: str) -> str | None:
    # None once SECRET_KEY changed: the session must sign in again.
    return sealing.unseal(sealed, purpose=_PURPOSE)


def provider_session_start(*, session_key: str, user: User, refresh_token: str | None) -> None:
    """A login session that came from the provider: re-checked after
    QASSIST_OIDC_RECHECK_SECONDS, with the refresh token when there is one."""
    now = timezone.now()
    ProviderSession.objects.update_or_create(
        session_key=session_key,
        defaults={
            "user": user,
            "refresh_token": _seal(refresh_token),
            "checked_at": now,
            "due_at": now + timedelta(seconds=settings.QASSIST_OIDC_RECHECK_SECONDS),
            "renewing_until": None,
        },
    )


def provider_session_recheck(
    *, session_key: str | None, now: datetime | None = None
) -> RecheckOutcome:
    """Called on each request and each websocket re-check. A session from the provider that is
    due is renewed with its refresh token: its memberships follow the groups the provider
    sends now. A refusal ends it (and, with QASSIST_OIDC_REFUSAL_OFFBOARDS, offboards the
    person); an unreachable provider is tried again while the last check is within
    QASSIST_OIDC_OUTAGE_GRACE_SECONDS. Sessions of local passwords are "fresh" always."""
    if not session_key:
        return "fresh"
    now = now or timezone.now()
    row = ProviderSession.objects.filter(session_key=session_key, due_at__lte=now).first()
    if row is None:
        return "fresh"
    # One process renews it: a rotated refresh token used twice would revoke the whole grant.
    claimed = (
        ProviderSession.objects.filter(pk=row.pk, due_at__lte=now)
        .filter(Q(renewing_until__isnull=True) | Q(renewing_until__lt=now))
        .update(renewing_until=now + RENEW_LEASE)
    )
    if not claimed:
        return "fresh"
    return _renew(row=row, now=now)


def _renew(*, row: ProviderSession, now: datetime) -> RecheckOutcome:
    identity = Identity.objects.select_related("user").filter(user_id=row.user_id).first()
    refresh_token = _unseal(row.refresh_token)
    if identity is None or refresh_token is None:
        logger.info("single sign-on: session of user %s ended: no refresh token", row.user_id)
        _session_end(session_key=row.session_key)
        return "ended"
    user = identity.user
    try:
        answer = oidc.refresh(refresh_token=refresh_token, subject=identity.subject)
    except SignInError as error:
        return _renew_failed(row=row, identity=identity, error=error, now=now)
    with transaction.atomic():
        identity.refresh_from_db()
        identity_apply_claims(identity=identity, claims=answer.claims, now=now)
        row.refresh_token = _seal(answer.refresh_token)
        row.checked_at = now
        row.due_at = now + timedelta(seconds=settings.QASSIST_OIDC_RECHECK_SECONDS)
        row.renewing_until = None
        row.save()
    logger.info("single sign-on: renewed the session of %s", user.username)
    return "renewed"


def _renew_failed(
    *, row: ProviderSession, identity: Identity, error: SignInError, now: datetime
) -> RecheckOutcome:
    user = identity.user
    if error.kind == "refused":
        logger.warning(
            "single sign-on: the provider refused to renew the session of %s (%s)",
            user.username,
            error.detail,
        )
        if settings.QASSIST_OIDC_REFUSAL_OFFBOARDS:
            identity_offboard(identity=identity, reason=error.detail)
        else:
            _session_end(session_key=row.session_key)
        return "ended"
    grace = timedelta(seconds=settings.QASSIST_OIDC_OUTAGE_GRACE_SECONDS)
    if error.kind == "unreachable" and now - row.checked_at < grace:
        logger.warning(
            "single sign-on: cannot renew the session of %s, trying again (%s)",
            user.username,
            error.detail,
        )
        ProviderSession.objects.filter(pk=row.pk).update(
            renewing_until=None, due_at=now + RETRY_AFTER_OUTAGE
        )
        return "unavailable"
    logger.warning(
        "single sign-on: ended the session of %s, which could not be renewed (%s: %s)",
        user.username,
        error.kind,
        error.detail,
    )
    _session_end(session_key=row.session_key)
    return "ended"


def _session_end(*, session_key: str) -> None:
    engine = import_module(settings.SESSION_ENGINE)
    engine.SessionStore(session_key).delete()
    ProviderSession.objects.filter(session_key=session_key).delete()


def identity_offboard(*, identity: Identity, reason: str = "") -> list[str]:
    """The provider no longer vouches for this person: every session of theirs ends (open
    websockets close at their next re-check), the account is switched off until the provider
    signs them in again, and the API keys they created are revoked. Returns the revoked keys'
    prefixes."""
    user = identity.user
    now = timezone.now()
    with transaction.atomic():
        identity.refused_at = now
        identity.save(update_fields=["refused_at"])
        user.is_active = False
        user.save(update_fields=["is_active"])
        keys = list(
            ApiKey.objects.filter(created_by=user).filter(
                Q(revoked_at__isnull=True) | Q(revoked_at__gt=now)
            )
        )
        for key in keys:
            api_key_revoke(api_key=key, at=now)
        prefixes = [key.prefix for key in keys]
    for session_key in list(user.provider_sessions.values_list("session_key", flat=True)):
        _session_end(session_key=session_key)
    logger.warning(
        "single sign-on: offboarded %s (%s): account switched off, API keys revoked: %s",
        user.username,
        reason or "refused by the provider",
        ", ".join(prefixes) or "none",
    )
    return prefixes
