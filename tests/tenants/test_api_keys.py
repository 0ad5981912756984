from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from tenants.models import ApiKey, Tenant
from tenants.services import (
    ApiKeyStatus,
    api_key_authenticate,
    api_key_create,
    api_key_filter_by_status,
    api_key_revoke,
    api_key_status,
)

pytestmark = pytest.mark.django_db

ApiKeyPair = tuple[ApiKey, str]


def test_it_creates_a_key_with_a_readable_prefix(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    assert re.fullmatch(r"qa_[A-Za-z0-9]{8}_[A-Za-z0-9]{32,}", raw)
    assert key.prefix == raw[:11]
    assert len(key.digest) == 64
    assert key.created_by is not None
    assert key.created_by.username == "owner"


def test_it_stores_no_secret(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    secret = raw.removeprefix(key.prefix + "_")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiKey._meta.db_table}")  # noqa: S608  # no user input
        rows = cursor.fetchall()
    assert len(rows) == 1
    for cell in rows[0]:
        assert secret not in str(cell)
        assert raw not in str(cell)


def test_it_makes_a_different_key_each_time(tenant: Tenant) -> None:
    first = api_key_create(tenant=tenant, name="one")
    second = api_key_create(tenant=tenant, name="two")
    assert first[1] != second[1]
    assert first[0].prefix != second[0].prefix


def test_it_authenticates_a_good_key(api_key: ApiKeyPair, tenant: Tenant) -> None:
    key, raw = api_key
    found = api_key_authenticate(raw_key=raw)
    assert found == key
    assert found is not None
    assert found.tenant == tenant


def test_it_loads_the_tenant_in_the_same_query(
    api_key: ApiKeyPair, django_assert_num_queries: Any
) -> None:
    _, raw = api_key
    found = api_key_authenticate(raw_key=raw)  # first use writes last_used_at
    assert found is not None
    with django_assert_num_queries(1):
        found = api_key_authenticate(raw_key=raw)
        assert found is not None
        assert found.tenant.slug == "acme"


def test_it_ignores_surrounding_whitespace(api_key: ApiKeyPair) -> None:
    _, raw = api_key
    assert api_key_authenticate(raw_key=f"  {raw}\n") == api_key[0]


def test_it_rejects_a_wrong_secret(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    wrong = raw[:-1] + ("A" if raw[-1] != "A" else "B")
    assert api_key_authenticate(raw_key=wrong) is None
    key.refresh_from_db()
    assert key.last_used_at is None


def test_it_rejects_an_unknown_prefix(api_key: ApiKeyPair) -> None:
    _, raw = api_key
    unknown = "qa_ZZZZZZZZ" + raw[11:]
    assert api_key_authenticate(raw_key=unknown) is None


@pytest.mark.parametrize(
    "raw", ["", "qa_", "Bearer x", "sk-abcdef", "qa_short_secret", "qa_AAAAAAAA_" + "x" * 10]
)
def test_it_rejects_malformed_keys_without_a_query(
    raw: str, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0):
        assert api_key_authenticate(raw_key=raw) is None


def test_it_rejects_a_revoked_key(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    api_key_revoke(api_key=key)
    assert api_key_authenticate(raw_key=raw) is None


def test_it_accepts_a_key_until_its_scheduled_revocation(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    api_key_revoke(api_key=key, at=timezone.now() + timedelta(days=1))
    assert api_key_authenticate(raw_key=raw) == key


def test_it_rejects_an_expired_key(tenant: Tenant) -> None:
    _, raw = api_key_create(
        tenant=tenant, name="old", expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert api_key_authenticate(raw_key=raw) is None


def test_it_accepts_a_key_before_it_expires(tenant: Tenant) -> None:
    key, raw = api_key_create(tenant=tenant, name="new", expires_at=timezone.now() + timedelta(1))
    assert api_key_authenticate(raw_key=raw) == key


def test_it_rejects_a_key_of_an_inactive_tenant(api_key: ApiKeyPair, tenant: Tenant) -> None:
    _, raw = api_key
    tenant.active = False
    tenant.save()
    assert api_key_authenticate(raw_key=raw) is None


def test_it_rejects_a_key_made_under_another_secret_key(api_key: ApiKeyPair) -> None:
    _, raw = api_key
    with override_settings(SECRET_KEY="another-secret-key-" + "x" * 40):
        assert api_key_authenticate(raw_key=raw) is None


def test_it_accepts_a_key_after_the_secret_key_is_rotated(api_key: ApiKeyPair) -> None:
    from django.conf import settings

    key, raw = api_key
    with override_settings(
        SECRET_KEY="the-new-secret-key-" + "x" * 40, SECRET_KEY_FALLBACKS=[settings.SECRET_KEY]
    ):
        assert api_key_authenticate(raw_key=raw) == key


def test_it_records_the_first_use(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    before = timezone.now()
    api_key_authenticate(raw_key=raw)
    key.refresh_from_db()
    assert key.last_used_at is not None
    assert key.last_used_at >= before


def test_it_writes_last_used_at_most_once_a_minute(
    api_key: ApiKeyPair, django_assert_num_queries: Any
) -> None:
    key, raw = api_key
    recently = timezone.now() - timedelta(seconds=30)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=recently)
    with django_assert_num_queries(1):  # the lookup; no UPDATE
        api_key_authenticate(raw_key=raw)
    key.refresh_from_db()
    assert key.last_used_at == recently


def test_it_writes_last_used_again_after_a_minute(api_key: ApiKeyPair) -> None:
    key, raw = api_key
    long_ago = timezone.now() - timedelta(seconds=61)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=long_ago)
    found = api_key_authenticate(raw_key=raw)
    key.refresh_from_db()
    assert key.last_used_at is not None
    assert key.last_used_at > long_ago
    assert found is not None
    assert found.last_used_at == key.last_used_at


def test_it_does_not_overwrite_a_newer_last_used_written_by_another_process(
    api_key: ApiKeyPair,
) -> None:
    from tenants.services import _api_key_touch

    key, _ = api_key
    stale = timezone.now() - timedelta(minutes=5)
    key.last_used_at = stale  # what this process loaded
    newer = timezone.now() - timedelta(seconds=5)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=newer)  # another process, meanwhile
    _api_key_touch(api_key=key, now=timezone.now())
    key.refresh_from_db()
    assert key.last_used_at == newer


def test_it_revokes_a_key_now_by_default(api_key: ApiKeyPair) -> None:
    key, _ = api_key
    before = timezone.now()
    api_key_revoke(api_key=key)
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert key.revoked_at >= before


def test_it_keeps_an_earlier_revocation(api_key: ApiKeyPair) -> None:
    key, _ = api_key
    first = timezone.now() - timedelta(days=1)
    api_key_revoke(api_key=key, at=first)
    api_key_revoke(api_key=key)
    key.refresh_from_db()
    assert key.revoked_at == first


def test_it_tells_each_status(tenant: Tenant) -> None:
    now = timezone.now()
    active, _ = api_key_create(tenant=tenant, name="active")
    expired, _ = api_key_create(tenant=tenant, name="expired", expires_at=now - timedelta(1))
    revoked, _ = api_key_create(tenant=tenant, name="revoked", expires_at=now - timedelta(1))
    api_key_revoke(api_key=revoked, at=now - timedelta(hours=1))
    later, _ = api_key_create(tenant=tenant, name="revoked tomorrow")
    api_key_revoke(api_key=later, at=now + timedelta(days=1))

    assert api_key_status(api_key=active, now=now) == "active"
    assert api_key_status(api_key=expired, now=now) == "expired"
    assert api_key_status(api_key=revoked, now=now) == "revoked"  # revocation wins
    assert api_key_status(api_key=later, now=now) == "active"

    def names(status: ApiKeyStatus) -> set[str]:
        keys = api_key_filter_by_status(queryset=ApiKey.objects.all(), status=status, now=now)
        return {key.name for key in keys}

    assert names("active") == {"active", "revoked tomorrow"}
    assert names("expired") == {"expired"}
    assert names("revoked") == {"revoked"}
