"""Business rules for tenants, memberships, API keys and usage.

Views, consumers, admin actions, management commands and Celery tasks call these functions;
they do not write tenant models themselves.
"""

from __future__ import annotations

import hmac
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import import_module
from typing import Literal, TypedDict

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.crypto import constant_time_compare, get_random_string, salted_hmac

from tenants.limits import Limits, Plan, Refusal, get_limiter
from tenants.models import ApiKey, Membership, PromptSuggestion, Tenant, TenantGroup, UsageRecord

AnyUser = AbstractBaseUser | AnonymousUser

# --- Tenants ---------------------------------------------------------------------------------


class ModelNotAllowed(Exception):
    """A tenant asked for a model it may not use (or one this deployment does not serve)."""


def deployment_models() -> list[str]:
    """The models this deployment may serve: QASSIST_MODEL, the default, then the others of
    QASSIST_MODELS."""
    return list(dict.fromkeys([str(settings.QASSIST_MODEL), *settings.QASSIST_MODELS]))


def tenant_models(*, tenant: Tenant) -> list[str]:
    """The models the tenant's members and keys may use, its default first. A model the
    deployment no longer lists is left out (an admin choice outliving a settings change)."""
    offered = deployment_models()
    default = tenant.default_model if tenant.default_model in offered else offered[0]
    extra = [m for m in tenant.allowed_models or [] if m in offered and m != default]
    return [default, *dict.fromkeys(extra)]


def tenant_model_choose(*, tenant: Tenant, requested: str = "") -> str:
    """The model that answers a request of the tenant: its default when `requested` is empty,
    else `requested` if the tenant may use it; ModelNotAllowed otherwise."""
    allowed = tenant_models(tenant=tenant)
    if not requested:
        return allowed[0]
    if requested not in allowed:
        raise ModelNotAllowed(
            f"The model '{requested}' is not available to this tenant; it may use "
            f"{', '.join(repr(m) for m in allowed)}."
        )
    return requested


class ModelNotServed(Exception):
    """A model the tenant may use (or one nobody knows) that no engine serves now."""


def tenant_served_models(*, tenant: Tenant, served: list[str]) -> list[str]:
    """What the tenant may ask for now: the models it may use that an engine serves
    (`served`), its default first. The only list a tenant is ever shown (`/v1/models`, the
    errors naming what it may use instead): models other tenants have stay unnamed."""
    return [m for m in tenant_models(tenant=tenant) if m in served]


def check_tenant_model(*, tenant: Tenant, requested: str, served: list[str]) -> str:
    """A model named in a REST request, checked before anything is admitted: ModelNotAllowed
    when this deployment has it but the tenant may not use it, ModelNotServed when it is
    unknown or no engine serves it now (the message names only what the tenant may use)."""
    if requested in deployment_models():
        tenant_model_choose(tenant=tenant, requested=requested)  # ModelNotAllowed
    usable = tenant_served_models(tenant=tenant, served=served)
    if requested not in usable:
        named = ", ".join(repr(m) for m in usable) or "none at the moment"
        raise ModelNotServed(
            f"The model '{requested}' does not exist or is not being served; this tenant may "
            f"use {named}."
        )
    return requested


def check_tenant_models(*, default_model: str, allowed_models: list[str]) -> None:
    """Admin input: every model named must be one this deployment serves (QASSIST_MODELS),
    else its prompts could not even be counted."""
    offered = deployment_models()
    unknown = [m for m in [default_model, *allowed_models] if m and m not in offered]
    if unknown:
        raise ValidationError(
            f"Not served by this deployment: {', '.join(unknown)}. "
            f"QASSIST_MODELS lists {', '.join(offered)}."
        )


# --- What a model's token counts for in limits and quotas -----------------------------------


def parse_model_token_weights(raw: str) -> dict[str, float]:
    """QASSIST_MODEL_TOKEN_WEIGHTS ("qwen2.5-coder-1.5b=3,smollm2-135m=0.5") as a dict;
    ValueError naming the part that is not `name=weight` with a weight above 0."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        name, sep, value = (x.strip() for x in part.rpartition("="))
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or not name or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"'{part}' is not name=weight with a weight above 0")
        weights[name] = weight
    return weights


def model_token_weight(model: str) -> float:
    """What one token of `model` counts for in the tenants' quotas and tokens-per-minute
    limits: its QASSIST_MODEL_TOKEN_WEIGHTS weight, 1 when it has none. Usage without a model
    (embeddings; records from before #36) counts 1. A malformed setting counts 1 everywhere
    (the system check qassist.E008 names it at start)."""
    return model_token_weights().get(model, 1.0) if model else 1.0


def model_token_weights() -> dict[str, float]:
    """The weights set (QASSIST_MODEL_TOKEN_WEIGHTS); none when it is malformed."""
    try:
        return parse_model_token_weights(str(settings.QASSIST_MODEL_TOKEN_WEIGHTS))
    except ValueError:
        return {}


def weighted_tokens(tokens: int, weight: float) -> int:
    """`tokens` of a model weighing `weight`, as limits and quotas count them (rounded up, so
    a weight above 1 never lets a token through free)."""
    return tokens if weight == 1.0 else math.ceil(tokens * weight)


def model_weighted_tokens(*, model: str, tokens: int) -> int:
    return weighted_tokens(tokens, model_token_weight(model))


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
    document_scope: str = ApiKey.Scope.ALL,
    groups: list[TenantGroup] | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its full secret: the only time the secret exists outside the client.
    `document_scope` and `groups`: which documents answers to it may rest on."""
    for group in groups or []:
        if group.tenant_id != tenant.pk:
            raise ValidationError(f"“{group}” is not a group of {tenant}.", code="invalid")
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
            document_scope=document_scope,
        )
        try:
            with transaction.atomic():
                api_key.save()
                api_key.groups.set(groups or [])
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


# --- Groups inside a tenant (who may read documents limited to them) -------------------------


def _django_group_name(tenant: Tenant, name: str) -> str:
    return f"{tenant.slug}: {name}"[:150]


def check_group_name(name: str) -> str:
    name = " ".join(name.split())
    if not name:
        raise ValidationError("A group needs a name.", code="invalid")
    if len(name) > 100:
        raise ValidationError("A group's name is at most 100 characters.", code="invalid")
    return name


@transaction.atomic
def tenant_group_save(*, group: TenantGroup) -> TenantGroup:
    """Save a tenant group, with the Django group behind it (made for a new one, renamed with
    it), named "<tenant slug>: <name>" so that two tenants may each have an "HR"."""
    from django.contrib.auth.models import Group

    group.name = check_group_name(group.name)
    wanted = _django_group_name(group.tenant, group.name)
    if group.group_id is None:
        group.group = Group.objects.create(name=wanted)
    elif group.group.name != wanted:
        group.group.name = wanted
        group.group.save(update_fields=["name"])
    group.save()
    return group


def tenant_group_create(*, tenant: Tenant, name: str) -> TenantGroup:
    return tenant_group_save(group=TenantGroup(tenant=tenant, name=name))


def tenant_group_set_members(*, group: TenantGroup, users: list[User]) -> None:
    """The group's members, from now on: only members of its tenant can be in it."""
    outsiders = [
        u
        for u in users
        if not Membership.objects.filter(user=u, tenant_id=group.tenant_id).exists()
    ]
    if outsiders:
        raise ValidationError(
            f"{outsiders[0].get_username()} is not a member of {group.tenant}.", code="invalid"
        )
    group.group.user_set.set(users)


def tenant_group_members(*, group: TenantGroup) -> QuerySet[User]:
    return group.group.user_set.order_by("username")


def tenant_groups_of(*, user: AnyUser, tenant: Tenant) -> QuerySet[TenantGroup]:
    """The groups of `tenant` that `user` is in."""
    if not user.is_authenticated:
        return TenantGroup.objects.none()
    return TenantGroup.objects.filter(tenant=tenant, group__user__pk=user.pk)


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


def tenants_administered_by(*, user: AnyUser) -> QuerySet[Tenant]:
    """The tenants (active or not) that `user` runs in the admin: a staff account whose
    membership says "tenant admin". Superusers are not special here; the admin checks that."""
    if not user.is_authenticated or not user.is_active or not getattr(user, "is_staff", False):
        return Tenant.objects.none()
    return Tenant.objects.filter(
        memberships__user_id=user.pk, memberships__role=Membership.Role.ADMIN
    ).order_by("slug")


def tenant_stamp_content_audit(*, tenant: Tenant, by: AnyUser | None) -> None:
    """Record on `tenant` (unsaved) who switched its content audit to its current value: who
    and since when while it is on, nothing once it is off (the admin's history keeps each
    switch). Only superusers switch it; the admin's form enforces that."""
    if tenant.content_audit:
        tenant.content_audit_by_id = by.pk if by is not None and by.is_authenticated else None
        tenant.content_audit_since = timezone.now()
    else:
        tenant.content_audit_by = None
        tenant.content_audit_since = None


def tenant_set_active(*, tenant: Tenant, active: bool) -> bool:
    """Switch a tenant on or off; an inactive tenant's keys and members are refused at once.
    Returns whether anything changed."""
    if tenant.active == active:
        return False
    tenant.active = active
    tenant.save(update_fields=["active", "updated_at"])
    return True


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


def usage_tokens_in_period(*, tenant_id: int, period: Literal["day", "month"]) -> int:
    """Tokens recorded for the tenant since the start of the local day or month, each model's
    weighed (`model_token_weight`): what a quota counter starts from when Redis does not have
    it."""
    since = usage_period_start(period=period)
    rows = (
        UsageRecord.objects.filter(tenant_id=tenant_id, created_at__gte=since)
        .order_by()
        .values("model")
        .annotate(
            prompt=Sum("prompt_tokens", default=0), completion=Sum("completion_tokens", default=0)
        )
    )
    return sum(
        model_weighted_tokens(model=row["model"], tokens=int(row["prompt"] + row["completion"]))
        for row in rows
    )


# --- Who is asking, and what their tenant allows ---------------------------------------------


@dataclass(frozen=True)
class Principal:
    """Who a request runs as: a member in the browser, or an API key. Either way, a tenant."""

    tenant: Tenant
    user: User | None = None
    api_key: ApiKey | None = None

    @property
    def key(self) -> str:
        if self.api_key is not None:
            return f"key:{self.api_key.pk}"
        return f"user:{self.user.pk if self.user is not None else 0}"

    @property
    def max_streams(self) -> int:
        if self.api_key is not None:
            return int(settings.QASSIST_API_KEY_MAX_STREAMS)
        return int(settings.QASSIST_USER_MAX_STREAMS)


def principal_is_member(*, principal: Principal) -> bool:
    """A browser user is still an active member of the principal's tenant."""
    if principal.user is None:
        return False
    return Membership.objects.filter(
        user_id=principal.user.pk,
        user__is_active=True,
        tenant_id=principal.tenant.pk,
        tenant__active=True,
    ).exists()


def connection_allowed(*, session_key: str | None, user_id: int, tenant_id: int) -> bool:
    """An open websocket may go on: its login session still exists and still belongs to the
    user (a logout or a password change ends it), the user is active, and still an active
    member of the tenant the socket works in."""
    if not session_key:
        return False
    engine = import_module(settings.SESSION_ENGINE)
    data = engine.SessionStore(session_key).load()
    if str(data.get(SESSION_KEY)) != str(user_id):
        return False
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return False
    stored_hash = data.get(HASH_SESSION_KEY)
    if not stored_hash or not constant_time_compare(stored_hash, user.get_session_auth_hash()):
        return False
    return Membership.objects.filter(
        user_id=user_id, tenant_id=tenant_id, tenant__active=True
    ).exists()


def tenant_limits(*, tenant: Tenant, principal_streams: int | None) -> Limits:
    return Limits(
        requests_per_minute=tenant.requests_per_minute,
        tokens_per_minute=tenant.tokens_per_minute,
        concurrent_streams=tenant.max_concurrent_streams,
        principal_concurrent_streams=principal_streams,
        daily_token_quota=tenant.daily_token_quota,
        monthly_token_quota=tenant.monthly_token_quota,
    )


def limits_plan(
    *,
    principal: Principal,
    tenant: Tenant,
    request_id: str,
    tokens: int,
    streams: bool = True,
    rate: bool = True,
    now: datetime | None = None,
    model: str = "",
) -> Plan:
    """What a request of `tokens` (worst case) of `model` asks of `tenant`'s limits, read
    fresh: a limit changed in the admin applies to the next request. Tokens count as the
    model's weight says (`model_token_weight`; "" counts 1)."""
    weight = model_token_weight(model)
    now = now or timezone.now()
    day = usage_period_start(period="day", now=now)
    month = usage_period_start(period="month", now=now)
    tomorrow = (day + timedelta(days=1, hours=2)).replace(hour=0)  # DST-safe: a day later
    next_month = (month + timedelta(days=32)).replace(day=1)
    return Plan(
        request_id=request_id,
        tenant_id=tenant.pk,
        principal=principal.key,
        tokens=weighted_tokens(tokens, weight),
        weight=weight,
        limits=tenant_limits(tenant=tenant, principal_streams=principal.max_streams),
        day=day.strftime("%Y-%m-%d"),
        month=month.strftime("%Y-%m"),
        seconds_to_next_day=max(1, int((_localize(tomorrow) - now).total_seconds())),
        seconds_to_next_month=max(1, int((_localize(next_month) - now).total_seconds())),
        streams=streams,
        rate=rate,
    )


def _localize(moment: datetime) -> datetime:
    """A wall-clock time in the deployment's zone as an aware datetime (DST gaps resolved)."""
    naive = moment.replace(tzinfo=None)
    return timezone.make_aware(naive, timezone.get_current_timezone())


def limits_reserve(*, plan: Plan) -> Refusal | None:
    return get_limiter().reserve(
        plan,
        used_in_period=lambda period: usage_tokens_in_period(
            tenant_id=plan.tenant_id, period=period
        ),
    )


def limits_settle(*, plan: Plan, used_tokens: int) -> None:
    """End the plan's reservation with the tokens really used (weighed as it was)."""
    get_limiter().settle(plan, used_tokens=weighted_tokens(used_tokens, plan.weight))


def limits_renew(*, plan: Plan) -> None:
    get_limiter().renew(plan)


REFUSAL_MESSAGES = {
    "requests_per_minute": "{tenant} has reached its limit of {limit} requests per minute.",
    "tokens_per_minute": "{tenant} has reached its limit of {limit} tokens per minute.",
    "concurrent_streams": "{tenant} already has {limit} replies being written at once.",
    "principal_concurrent_streams": "You already have {limit} replies being written at once.",
    "daily_token_quota": "{tenant} has used its daily quota of {limit} tokens.",
    "monthly_token_quota": "{tenant} has used its monthly quota of {limit} tokens.",
}


def refusal_message(*, refusal: Refusal, plan: Plan, tenant: Tenant) -> str:
    limit = getattr(plan.limits, refusal.reason)
    text = REFUSAL_MESSAGES[refusal.reason].format(tenant=tenant.name or tenant.slug, limit=limit)
    if refusal.reason == "tokens_per_minute" and plan.tokens > (limit or 0):
        counted = (
            "" if plan.weight == 1.0 else f", each counted {plan.weight:g} times for its model"
        )
        return (
            f"This request may take {plan.tokens} tokens (prompt + max_tokens{counted}), more "
            f"than the {limit} tokens per minute {tenant.name or tenant.slug} may use: lower "
            "max_tokens."
        )
    return f"{text} Try again in {refusal.retry_after:.0f} s."


def usage_record_embeddings(
    *, principal: Principal, tokens: int, latency_ms: int, ok: bool
) -> None:
    """Texts embedded over REST (`/v1/embeddings`): prompt tokens only, reason "embeddings"."""
    UsageRecord.objects.create(
        tenant=principal.tenant,
        user=principal.user,
        api_key=principal.api_key,
        prompt_tokens=tokens,
        latency_ms=latency_ms,
        status=UsageRecord.Status.OK if ok else UsageRecord.Status.ERROR,
        reason="embeddings",
    )


def usage_record_refusal(*, principal: Principal, reason: str) -> None:
    """A refused request is usage too: staff see who hit which limit."""
    UsageRecord.objects.create(
        tenant=principal.tenant,
        user=principal.user,
        api_key=principal.api_key,
        status=UsageRecord.Status.REJECTED,
        reason=reason,
    )


# --- prompt suggestions on a new chat ---------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    title: str
    prompt: str


# A tenant whose admins set none shows these.
DEFAULT_SUGGESTIONS = (
    Suggestion("Explain a concept", "Explain what a Python decorator is, with a short example."),
    Suggestion("用中文总结", "请用三句话总结一下什么是持续集成。"),
    Suggestion(
        "Draft an email",
        "Write a short, polite email asking to move tomorrow's meeting to Friday.",
    ),
    Suggestion(
        "Write code", "Write a SQL query that returns the ten customers with the most orders."
    ),
)
MAX_SUGGESTIONS = 6  # a new chat shows two rows of three at most (one on a phone: two)


def prompt_suggestions_for(*, tenant: Tenant) -> list[Suggestion]:
    """The suggestions a new chat of `tenant` offers: its admins' own, in their order, or the
    built-in four when they set none."""
    own = [
        Suggestion(s.title, s.prompt)
        for s in PromptSuggestion.objects.filter(tenant=tenant)[:MAX_SUGGESTIONS]
    ]
    return own or list(DEFAULT_SUGGESTIONS)
