"""Business rules for tenants, memberships, API keys and usage.

Views, consumers, admin actions, management commands and Celery tasks call these functions;
they do not write tenant models themselves.
"""

from __future__ import annotations

import hmac
import re
from datetime import datetime, timedelta
from typing import Literal, TypedDict

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.crypto import get_random_string, salted_hmac

from tenants.models import ApiKey, Membership, Tenant, UsageRecord

AnyUser = AbstractBaseUser | AnonymousUser

# --- Tenants ---------------------------------------------------------------------------------

_SLUG_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?")


def check_tenant_slug(slug: str) -> str:
    """The slug as given if it is acceptable; it ends up in URLs, Redis keys and log lines."""
    if not _SLUG_RE.fullmatch(slug):
        raise ValidationError(
            f"“{slug}” is not a valid tenant slug: use 1 to 50 lowercase letters, digits and "
            "hyphens, starting and ending with a letter or digit.",
            code="invalid",
        )
    return slug


def tenant_create(
    *,
    slug: str,
    name: str | None = None,
    active: bool = True,
    priority: int = 0,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent_streams: int | None = None,
    daily_token_quota: int | None = None,
    monthly_token_quota: int | None = None,
    system_prompt: str = "",
) -> Tenant:
    """Create a tenant. Limits left as None mean "no limit"."""
    try:
        check_tenant_slug(slug)
    except ValidationError as error:
        raise ValidationError({"slug": error.error_list}) from None
    tenant = Tenant(
        slug=slug,
        name=name or slug,
        active=active,
        priority=priority,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        max_concurrent_streams=max_concurrent_streams,
        daily_token_quota=daily_token_quota,
        monthly_token_quota=monthly_token_quota,
        system_prompt=system_prompt,
    )
    duplicate = ValidationError(
        {"slug": [f"A tenant with the slug “{slug}” already exists."]}, code="unique"
    )
    if Tenant.objects.filter(slug=slug).exists():
        raise duplicate
    tenant.full_clean(validate_unique=False)
    try:
        with transaction.atomic():
            tenant.save()
    except IntegrityError:  # created by someone else since the check above
        raise duplicate from None
    return tenant


# --- API keys --------------------------------------------------------------------------------

API_KEY_PREFIX = "qa_"
_KEY_ID_LENGTH = 8
_KEY_SECRET_LENGTH = 40  # base62: about 238 bits
_KEY_RE = re.compile(
    rf"(?P<prefix>{API_KEY_PREFIX}[A-Za-z0-9]{{{_KEY_ID_LENGTH}}})_[A-Za-z0-9]{{32,128}}"
)
_DIGEST_SALT = "qassist.tenants.api_key"
LAST_USED_RESOLUTION = timedelta(minutes=1)

ApiKeyStatus = Literal["active", "expired", "revoked"]


def _api_key_digests(raw_key: str) -> list[str]:
    """The digest under SECRET_KEY first, then under each fallback (keys survive a rotation)."""
    secret_keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return [
        salted_hmac(_DIGEST_SALT, raw_key, secret=secret_key, algorithm="sha256").hexdigest()
        for secret_key in secret_keys
    ]


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    created_by: User | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its full secret: the only time the secret exists outside the client."""
    for _attempt in range(5):
        prefix = API_KEY_PREFIX + get_random_string(_KEY_ID_LENGTH)
        if ApiKey.objects.filter(prefix=prefix).exists():
            continue
        raw_key = f"{prefix}_{get_random_string(_KEY_SECRET_LENGTH)}"
        api_key = ApiKey(
            tenant=tenant,
            name=name,
            prefix=prefix,
            digest=_api_key_digests(raw_key)[0],
            created_by=created_by,
            expires_at=expires_at,
        )
        try:
            with transaction.atomic():
                api_key.save()
        except IntegrityError:  # the same prefix drawn concurrently: draw again
            continue
        return api_key, raw_key
    raise RuntimeError("Could not draw an unused API key prefix")  # pragma: no cover


def api_key_status(*, api_key: ApiKey, now: datetime | None = None) -> ApiKeyStatus:
    """Revocation wins over expiry; a revocation dated in the future is not in force yet."""
    now = now or timezone.now()
    if api_key.revoked_at is not None and api_key.revoked_at <= now:
        return "revoked"
    if api_key.expires_at is not None and api_key.expires_at <= now:
        return "expired"
    return "active"


def api_key_filter_by_status(
    *, queryset: QuerySet[ApiKey], status: ApiKeyStatus, now: datetime | None = None
) -> QuerySet[ApiKey]:
    """The keys of `queryset` that api_key_status() would call `status`, as one query."""
    now = now or timezone.now()
    revoked = Q(revoked_at__lte=now)
    expired = Q(expires_at__lte=now)
    if status == "revoked":
        return queryset.filter(revoked)
    if status == "expired":
        return queryset.filter(expired).exclude(revoked)
    return queryset.exclude(revoked).exclude(expired)


def api_key_authenticate(*, raw_key: str) -> ApiKey | None:
    """The usable key (its tenant loaded) that `raw_key` is, or None. Never raises on bad input."""
    match = _KEY_RE.fullmatch(raw_key.strip())
    if match is None:
        return None
    api_key = ApiKey.objects.select_related("tenant").filter(prefix=match["prefix"]).first()
    if api_key is None:
        return None
    candidates = _api_key_digests(match[0])
    # Evaluate every candidate so the time taken does not depend on which one matched.
    if not any([hmac.compare_digest(api_key.digest, digest) for digest in candidates]):  # noqa: C419
        return None
    now = timezone.now()
    if api_key_status(api_key=api_key, now=now) != "active" or not api_key.tenant.active:
        return None
    _api_key_touch(api_key=api_key, now=now)
    return api_key


def _api_key_touch(*, api_key: ApiKey, now: datetime) -> None:
    """Record use at most once per LAST_USED_RESOLUTION, so busy keys do not write per request."""
    threshold = now - LAST_USED_RESOLUTION
    if api_key.last_used_at is not None and api_key.last_used_at > threshold:
        return
    # Conditional UPDATE: of several processes seeing a stale value, one writes.
    updated = (
        ApiKey.objects.filter(pk=api_key.pk)
        .filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=threshold))
        .update(last_used_at=now)
    )
    if updated:
        api_key.last_used_at = now


def api_key_revoke(*, api_key: ApiKey, at: datetime | None = None) -> ApiKey:
    """Revoke from `at` (default: now). An earlier revocation already in place is kept."""
    at = at or timezone.now()
    if api_key.revoked_at is None or api_key.revoked_at > at:
        api_key.revoked_at = at
        api_key.save(update_fields=["revoked_at"])
    return api_key


# --- Memberships -----------------------------------------------------------------------------


def tenants_for_user(*, user: AnyUser) -> QuerySet[Tenant]:
    """The active tenants `user` belongs to, by slug. Staff get no implicit access."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(active=True, memberships__user_id=user.pk).order_by("slug")


def membership_for(*, user: AnyUser, tenant_slug: str | None = None) -> Membership | None:
    """`user`'s membership in the active tenant `tenant_slug`, or in their first one if None."""
    if not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("tenant").filter(
        user_id=user.pk, tenant__active=True
    )
    if tenant_slug is not None:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    return memberships.order_by("tenant__slug").first()


# --- Usage -----------------------------------------------------------------------------------


class UsageTotals(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    requests: int  # served, cancelled or failed: every request that was not rejected
    rejected: int


def usage_period_start(*, period: Literal["day", "month"], now: datetime | None = None) -> datetime:
    """Midnight starting today or the 1st of this month, in settings.TIME_ZONE: quota windows."""
    local = timezone.localtime(now or timezone.now())
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        start = start.replace(day=1)
    return start


def usage_totals(*, tenant: Tenant, since: datetime, until: datetime | None = None) -> UsageTotals:
    """Tokens and requests recorded for `tenant` from `since` (inclusive) to `until` (exclusive)."""
    records = UsageRecord.objects.filter(tenant=tenant, created_at__gte=since)
    if until is not None:
        records = records.filter(created_at__lt=until)
    rejected = Q(status=UsageRecord.Status.REJECTED)
    sums = records.aggregate(
        prompt=Sum("prompt_tokens", default=0),
        completion=Sum("completion_tokens", default=0),
        requests=Count("id", filter=~rejected),
        rejected=Count("id", filter=rejected),
    )
    return UsageTotals(
        prompt_tokens=sums["prompt"],
        completion_tokens=sums["completion"],
        total_tokens=sums["prompt"] + sums["completion"],
        requests=sums["requests"],
        rejected=sums["rejected"],
    )
