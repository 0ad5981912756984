from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.utils import timezone

from tenants.models import Membership, Tenant, UsageRecord
from tenants.services import (
    membership_for,
    tenant_create,
    tenants_for_user,
    usage_period_start,
    usage_totals,
)

pytestmark = pytest.mark.django_db


def test_it_creates_a_tenant_with_its_limits() -> None:
    tenant = tenant_create(
        slug="sales-emea",
        name="Sales EMEA",
        requests_per_minute=10,
        tokens_per_minute=5000,
        max_concurrent_streams=2,
        daily_token_quota=100_000,
        monthly_token_quota=1_000_000,
        system_prompt="Answer in English.",
        priority=5,
    )
    tenant.refresh_from_db()
    assert tenant.name == "Sales EMEA"
    assert (tenant.requests_per_minute, tenant.tokens_per_minute) == (10, 5000)
    assert tenant.max_concurrent_streams == 2
    assert (tenant.daily_token_quota, tenant.monthly_token_quota) == (100_000, 1_000_000)
    assert tenant.system_prompt == "Answer in English."
    assert tenant.priority == 5
    assert tenant.active


def test_it_names_a_tenant_after_its_slug_by_default() -> None:
    tenant = tenant_create(slug="ops")
    assert tenant.name == "ops"
    assert tenant.requests_per_minute is None  # no limit


def test_it_rejects_a_duplicate_slug(tenant: Tenant) -> None:
    with pytest.raises(ValidationError) as excinfo:
        tenant_create(slug="acme")
    assert "already exists" in excinfo.value.message_dict["slug"][0]
    assert Tenant.objects.filter(slug="acme").count() == 1


@pytest.mark.parametrize(
    "slug", ["", "Acme", "acme corp", "acme_corp", "-acme", "acme-", "ä", "a" * 51, "a/b"]
)
def test_it_rejects_a_bad_slug(slug: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        tenant_create(slug=slug)
    assert "not a valid tenant slug" in excinfo.value.message_dict["slug"][0]
    assert not Tenant.objects.exists()


def test_it_rejects_a_negative_limit() -> None:
    with pytest.raises(ValidationError) as excinfo:
        tenant_create(slug="acme", requests_per_minute=-1)
    assert "requests_per_minute" in excinfo.value.message_dict
    assert not Tenant.objects.exists()


def test_it_lists_only_the_users_active_tenants(
    tenant: Tenant, other_tenant: Tenant, member: User
) -> None:
    inactive = tenant_create(slug="closed", active=False)
    Membership.objects.create(user=member, tenant=inactive)
    Membership.objects.create(user=member, tenant=other_tenant)
    assert list(tenants_for_user(user=member)) == [tenant, other_tenant]


def test_it_lists_no_tenants_for_an_outsider_of_acme(outsider: User, tenant: Tenant) -> None:
    assert tenant not in tenants_for_user(user=outsider)


def test_it_lists_no_tenants_for_an_anonymous_user(tenant: Tenant) -> None:
    assert list(tenants_for_user(user=AnonymousUser())) == []
    assert membership_for(user=AnonymousUser()) is None


def test_it_finds_the_membership_by_tenant_slug(owner: User, tenant: Tenant) -> None:
    membership = membership_for(user=owner, tenant_slug="acme")
    assert membership is not None
    assert membership.tenant == tenant
    assert membership.role == Membership.Role.ADMIN


def test_it_picks_the_first_tenant_when_no_slug_is_given(
    member: User, other_tenant: Tenant
) -> None:
    Membership.objects.create(user=member, tenant=other_tenant)
    membership = membership_for(user=member)
    assert membership is not None
    assert membership.tenant.slug == "acme"


def test_it_finds_no_membership_in_someone_elses_tenant(outsider: User, tenant: Tenant) -> None:
    assert membership_for(user=outsider, tenant_slug="acme") is None


def test_it_finds_no_membership_in_an_inactive_tenant(member: User, tenant: Tenant) -> None:
    tenant.active = False
    tenant.save()
    assert membership_for(user=member, tenant_slug="acme") is None
    assert membership_for(user=member) is None


def _usage(tenant: Tenant, prompt: int, completion: int, at: datetime, **kwargs: object) -> None:
    UsageRecord.objects.create(
        tenant=tenant, prompt_tokens=prompt, completion_tokens=completion, created_at=at, **kwargs
    )


def test_it_totals_usage_since_a_moment(tenant: Tenant, other_tenant: Tenant) -> None:
    now = timezone.now()
    _usage(tenant, 100, 20, now - timedelta(hours=1))
    _usage(tenant, 50, 5, now - timedelta(minutes=1), status=UsageRecord.Status.CANCELLED)
    _usage(tenant, 0, 0, now, status=UsageRecord.Status.REJECTED)
    _usage(tenant, 999, 999, now - timedelta(days=2))  # before `since`
    _usage(other_tenant, 999, 999, now)  # someone else's
    totals = usage_totals(tenant=tenant, since=now - timedelta(days=1))
    assert totals == {
        "prompt_tokens": 150,
        "completion_tokens": 25,
        "total_tokens": 175,
        "requests": 2,
        "rejected": 1,
    }


def test_it_totals_zero_for_a_tenant_without_usage(tenant: Tenant) -> None:
    totals = usage_totals(tenant=tenant, since=timezone.now() - timedelta(days=1))
    assert totals == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "requests": 0,
        "rejected": 0,
    }


def test_it_stops_totals_at_until(tenant: Tenant) -> None:
    now = timezone.now()
    _usage(tenant, 10, 1, now - timedelta(hours=2))
    _usage(tenant, 20, 2, now)
    totals = usage_totals(
        tenant=tenant, since=now - timedelta(days=1), until=now - timedelta(hours=1)
    )
    assert totals["total_tokens"] == 11


def test_it_starts_quota_periods_at_local_midnight() -> None:
    shanghai = ZoneInfo("Asia/Shanghai")
    with timezone.override(shanghai):
        now = datetime(2026, 3, 15, 1, 30, tzinfo=ZoneInfo("UTC"))  # 09:30 in Shanghai
        assert usage_period_start(period="day", now=now) == datetime(2026, 3, 15, tzinfo=shanghai)
        assert usage_period_start(period="month", now=now) == datetime(2026, 3, 1, tzinfo=shanghai)
