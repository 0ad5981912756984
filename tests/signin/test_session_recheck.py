"""Sessions from the identity provider are re-checked with it once due: groups changed there
change memberships here, a person disabled there is offboarded (chat, REST keys, open
websockets), and a provider that is down is waited for, within a grace. Against the real test
provider; a session is made due by moving its due time, never by waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from pytest_django import Settings

from qassist.asgi import application
from signin import services
from signin.models import Identity, ProviderSession
from tenants.models import ApiKey, Membership, Tenant
from tenants.services import api_key_authenticate, api_key_create
from tests.signin.conftest import BACK_TO, configure, sign_in
from tests.signin.idp import LiveProvider, start_provider


def make_due(client: Client) -> None:
    ProviderSession.objects.filter(session_key=client.session.session_key).update(
        due_at=timezone.now() - timedelta(seconds=1)
    )


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.mark.django_db
def test_a_session_is_not_rechecked_before_it_is_due(sso: LiveProvider, sales: Tenant) -> None:
    client = Client()
    sign_in(client, sso, "alice")
    sso.put_account("alice", email="alice@northwind.example", groups=[])
    assert client.get("/").status_code == 200
    assert Membership.objects.filter(user__username="alice").exists()


@pytest.mark.django_db
def test_a_due_session_is_renewed_and_follows_the_groups(sso: LiveProvider, sales: Tenant) -> None:
    client = Client()
    sign_in(client, sso, "alice")
    row = ProviderSession.objects.get(session_key=client.session.session_key)
    first_token = row.refresh_token
    sso.put_account("alice", email="alice@northwind.example", groups=["sales", "it-admins"])
    make_due(client)
    assert client.get("/").status_code == 200
    alice = User.objects.get(username="alice")
    assert Membership.objects.get(user=alice).role == "admin"
    row.refresh_from_db()
    assert row.due_at > timezone.now()
    assert services._unseal(row.refresh_token) != services._unseal(first_token)  # rotated

    sso.put_account("alice", email="alice@northwind.example", groups=["marketing"])
    make_due(client)
    response = client.get("/")
    assert response.status_code == 403  # signed in still, in no tenant any more
    assert b"No workspace yet" in response.content
    assert signed_in(client)


@pytest.mark.django_db
def test_a_person_disabled_at_the_provider_is_offboarded(
    sso: LiveProvider, sales: Tenant, other_tenant: Tenant
) -> None:
    sso.put_account("bob", email="bob@northwind.example", groups=["it-admins"])
    client = Client()
    sign_in(client, sso, "bob")
    bob = User.objects.get(username="bob")
    _key, raw = api_key_create(tenant=sales, name="bob's script", created_by=bob)
    _other, other_raw = api_key_create(tenant=sales, name="someone else's")
    assert api_key_authenticate(raw_key=raw) is not None

    sso.put_account("bob", email="bob@northwind.example", groups=["it-admins"], disabled=True)
    make_due(client)
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert not signed_in(client)
    bob.refresh_from_db()
    assert not bob.is_active
    assert api_key_authenticate(raw_key=raw) is None  # revoked
    assert api_key_authenticate(raw_key=other_raw) is not None  # not bob's
    assert not ProviderSession.objects.filter(user=bob).exists()
    identity = Identity.objects.get(user=bob)
    assert identity.refused_at is not None
    # The login page says why.
    assert b"Your session ended" in client.get(response["Location"]).content

    # Back at the provider: the next sign-in lets them in again; the keys stay revoked.
    sso.put_account("bob", email="bob@northwind.example", groups=["it-admins"])
    again = Client()
    assert sign_in(again, sso, "bob").status_code == 302
    bob.refresh_from_db()
    assert bob.is_active
    assert api_key_authenticate(raw_key=raw) is None
    assert ApiKey.objects.get(name="bob's script").revoked_at is not None


@pytest.mark.django_db
def test_without_offboarding_a_refusal_ends_only_the_session(
    settings: Settings, sso: LiveProvider, sales: Tenant
) -> None:
    settings.QASSIST_OIDC_REFUSAL_OFFBOARDS = False
    client = Client()
    sign_in(client, sso, "alice")
    alice = User.objects.get(username="alice")
    _key, raw = api_key_create(tenant=sales, name="alice's", created_by=alice)
    sso.put_account("alice", email="alice@northwind.example", groups=["sales"], disabled=True)
    make_due(client)
    assert client.get("/").status_code == 302
    alice.refresh_from_db()
    assert alice.is_active
    assert api_key_authenticate(raw_key=raw) is not None


@pytest.fixture
def own_provider(settings: Settings) -> Iterator[LiveProvider]:
    """A provider of this test's own, which it may stop."""
    started = start_provider([BACK_TO])
    started.reset_accounts()
    configure(settings, started.issuer)
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.django_db
def test_a_provider_that_is_down_is_waited_for_within_the_grace(
    settings: Settings, own_provider: LiveProvider, sales: Tenant
) -> None:
    client = Client()
    sign_in(client, own_provider, "alice")
    own_provider.stop()
    make_due(client)
    assert client.get("/").status_code == 200  # kept: tried again later
    row = ProviderSession.objects.get(session_key=client.session.session_key)
    assert row.due_at > timezone.now()

    # Past the grace since the last good check, the session ends.
    settings.QASSIST_OIDC_OUTAGE_GRACE_SECONDS = 60
    ProviderSession.objects.filter(pk=row.pk).update(
        checked_at=timezone.now() - timedelta(seconds=61)
    )
    make_due(client)
    assert client.get("/").status_code == 302
    assert not signed_in(client)
    assert User.objects.get(username="alice").is_active  # not offboarded: nobody refused


@pytest.mark.django_db
def test_logging_out_forgets_the_refresh_token(sso: LiveProvider, sales: Tenant) -> None:
    client = Client()
    sign_in(client, sso, "alice")
    assert ProviderSession.objects.exists()
    client.post("/accounts/logout/")
    assert not ProviderSession.objects.exists()


@pytest.mark.django_db
def test_local_password_sessions_are_never_sent_to_the_provider(
    sso: LiveProvider, member: User
) -> None:
    client = Client()
    client.force_login(member)
    assert services.provider_session_recheck(session_key=client.session.session_key) == "fresh"
    assert client.get("/").status_code == 200


@pytest.mark.django_db
def test_one_renewal_at_a_time(sso: LiveProvider, sales: Tenant) -> None:
    # A rotated refresh token used twice would make the provider revoke the whole grant: a
    # second process finding the session being renewed leaves it alone.
    client = Client()
    sign_in(client, sso, "alice")
    make_due(client)
    key = client.session.session_key
    ProviderSession.objects.filter(session_key=key).update(
        renewing_until=timezone.now() + timedelta(seconds=30)
    )
    assert services.provider_session_recheck(session_key=key) == "fresh"
    ProviderSession.objects.filter(session_key=key).update(renewing_until=None)
    assert services.provider_session_recheck(session_key=key) == "renewed"


# --- open websockets ---------------------------------------------------------------------------


def _signed_in_cookie(provider: LiveProvider, login: str) -> str:
    client = Client()
    sign_in(client, provider, login)
    return str(client.cookies[django_settings.SESSION_COOKIE_NAME].value)


async def _open(cookie: str) -> WebsocketCommunicator:
    headers = [
        (b"host", b"localhost"),
        (b"origin", b"http://localhost"),
        (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode()),
    ]
    socket = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, detail = await socket.connect(timeout=10)
    assert connected, detail
    return socket


async def _closed_with(socket: WebsocketCommunicator) -> Any:
    """Frames until the socket closes; its close code. Bounded, not timed: the re-check runs
    every second here."""
    while True:
        message = await socket.receive_output(timeout=30)
        if message["type"] == "websocket.close":
            return message.get("code")


@database_sync_to_async
def _make_all_due() -> None:
    ProviderSession.objects.update(due_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["group removed", "disabled"])
async def test_an_open_websocket_closes_when_the_provider_says_so(
    settings: Settings, sso: LiveProvider, sales: Tenant, change: str
) -> None:
    settings.QASSIST_WS_RECHECK_SECONDS = 1
    cookie = await database_sync_to_async(_signed_in_cookie)(sso, "alice")
    socket = await _open(cookie)
    if change == "disabled":
        sso.put_account("alice", email="alice@northwind.example", groups=["sales"], disabled=True)
    else:
        sso.put_account("alice", email="alice@northwind.example", groups=["marketing"])
    await _make_all_due()
    assert await _closed_with(socket) == 4403
    membership = await database_sync_to_async(
        Membership.objects.filter(user__username="alice").exists
    )()
    assert membership is (change == "disabled")  # offboarding keeps them; the account is off
