"""Single sign-on against the real test identity provider (tests/signin/idp.py): one provider
for the session, every account as ACCOUNTS says at the start of each test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client
from pytest_django import Settings

from signin import oidc
from signin.models import GroupMapping
from tenants.models import Membership, Tenant
from tests.signin.idp import CLIENT_ID, CLIENT_SECRET, LiveProvider, authorize, start_provider

BACK_TO = "http://testserver/accounts/oidc/callback/"
PROVIDER_NAME = "Northwind ID"


@pytest.fixture(scope="session")
def provider() -> Iterator[LiveProvider]:
    started = start_provider([BACK_TO])
    try:
        yield started
    finally:
        started.stop()


def configure(settings: Settings, issuer: str, **overrides: Any) -> None:
    settings.QASSIST_OIDC_ISSUER = issuer
    settings.QASSIST_OIDC_CLIENT_ID = CLIENT_ID
    settings.QASSIST_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.QASSIST_OIDC_SCOPES = "openid profile email groups"
    settings.QASSIST_OIDC_NAME = PROVIDER_NAME
    for name, value in overrides.items():
        setattr(settings, name, value)
    oidc.reset()


@pytest.fixture
def sso(settings: Settings, provider: LiveProvider) -> Iterator[LiveProvider]:
    """qassist configured for the test provider, its directory as ACCOUNTS says."""
    provider.reset_accounts()
    configure(settings, provider.issuer)
    yield provider
    oidc.reset()


@pytest.fixture
def sales(tenant: Tenant) -> Tenant:
    """acme's members come from the group "sales"; "it-admins" run it."""
    GroupMapping.objects.create(tenant=tenant, group="sales", role=Membership.Role.MEMBER)
    GroupMapping.objects.create(tenant=tenant, group="it-admins", role=Membership.Role.ADMIN)
    return tenant


def callback_path(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def sign_in(
    client: Client, provider: LiveProvider, login: str, *, consent: bool = True, next: str = ""
) -> Any:
    """The whole flow: qassist's start, the provider's pages, back to qassist's callback.
    Returns the callback's response."""
    start = client.get("/accounts/oidc/start/", {"next": next} if next else {})
    assert start.status_code == 302, start.content
    back = authorize(start["Location"], login=login, back_to=BACK_TO, consent=consent)
    return client.get(callback_path(back))
