"""Signing in with the identity provider, against the real test provider: the flow, who the
person becomes, and each way it can fail ending on its own page."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from signin.models import GroupMapping, Identity, ProviderSession
from tenants.models import Membership, Tenant
from tests.conftest import PASSWORD
from tests.signin.conftest import BACK_TO, PROVIDER_NAME, callback_path, configure, sign_in
from tests.signin.idp import LiveProvider, authorize

pytestmark = pytest.mark.django_db


def signed_in_user(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.filter(pk=user_id).first() if user_id else None


# --- the login page ----------------------------------------------------------------------------


def test_the_login_page_offers_the_provider_and_keeps_passwords(sso: LiveProvider) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in page
    assert 'name="password"' in page


def test_without_a_provider_the_login_page_has_passwords_only(db: None) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with" not in page
    assert 'name="password"' in page
    assert Client().get("/accounts/oidc/start/").status_code == 404


def test_a_local_password_still_logs_in_beside_the_provider(
    sso: LiveProvider, member: User
) -> None:
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": "member", "password": PASSWORD}, follow=False
    )
    assert response.status_code == 302
    assert signed_in_user(client) == member


# --- who the person becomes ---------------------------------------------------------------------


def test_a_first_sign_in_creates_the_person_and_opens_the_chat(
    sso: LiveProvider, sales: Tenant
) -> None:
    client = Client()
    response = sign_in(client, sso, "alice")
    assert response.status_code == 302
    assert response["Location"] == "/"
    user = signed_in_user(client)
    assert user is not None
    assert (user.username, user.email, user.has_usable_password()) == (
        "alice",
        "alice@northwind.example",
        False,
    )
    identity = Identity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (sso.issuer, "alice")
    assert list(Membership.objects.filter(user=user).values_list("tenant__slug", "role")) == [
        ("acme", "member")
    ]
    row = ProviderSession.objects.get(session_key=client.session.session_key)
    assert row.due_at - row.checked_at == timedelta(seconds=900)  # QASSIST_OIDC_RECHECK_SECONDS
    assert row.refresh_token  # kept (encrypted) for the re-check
    assert client.get("/").status_code == 200  # the chat


def test_it_goes_back_to_the_page_asked_for_and_never_elsewhere(
    sso: LiveProvider, sales: Tenant
) -> None:
    assert sign_in(Client(), sso, "alice", next="/sessions/")["Location"] == "/sessions/"
    assert sign_in(Client(), sso, "alice", next="https://evil.example/")["Location"] == "/"


def test_a_person_is_found_by_subject_not_by_email(sso: LiveProvider, sales: Tenant) -> None:
    sign_in(Client(), sso, "alice")
    sso.put_account("alice", email="a.archer@northwind.example", groups=["sales"])
    client = Client()
    sign_in(client, sso, "alice")
    user = signed_in_user(client)
    assert user is not None
    assert User.objects.filter(identity__isnull=False).count() == 1
    assert user.email == "a.archer@northwind.example"


def test_an_account_with_the_same_username_and_email_is_never_taken_over(
    sso: LiveProvider, sales: Tenant
) -> None:
    local = User.objects.create_user("alice", "alice@northwind.example", PASSWORD)
    client = Client()
    sign_in(client, sso, "alice")
    user = signed_in_user(client)
    assert user is not None
    assert user != local
    assert user.username == "alice-2"
    assert not Membership.objects.filter(user=local).exists()
    again = Client()
    again.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert signed_in_user(again) == local  # its password still works


def test_another_provider_with_the_same_subject_is_another_person(
    sso: LiveProvider, sales: Tenant
) -> None:
    elsewhere = User.objects.create_user("someone")
    Identity.objects.create(user=elsewhere, issuer="https://other.example", subject="alice")
    client = Client()
    sign_in(client, sso, "alice")
    assert signed_in_user(client) not in (None, elsewhere)


# --- groups to memberships ---------------------------------------------------------------------


def test_groups_map_to_memberships_and_the_tenant_admin_role(
    sso: LiveProvider, sales: Tenant, other_tenant: Tenant
) -> None:
    GroupMapping.objects.create(tenant=other_tenant, group="sales", role="member")
    sso.put_account("bob", email="bob@northwind.example", groups=["sales", "it-admins"])
    client = Client()
    sign_in(client, sso, "bob")
    user = signed_in_user(client)
    assert user is not None
    roles = dict(Membership.objects.filter(user=user).values_list("tenant__slug", "role"))
    assert roles == {"acme": "admin", "globex": "member"}  # the highest role of acme's groups
    assert user.is_staff  # a tenant admin runs acme in the admin
    assert client.get("/admin/").status_code == 200


def test_a_group_gone_at_the_provider_takes_the_membership_at_the_next_sign_in(
    sso: LiveProvider, sales: Tenant
) -> None:
    sso.put_account("bob", email="bob@northwind.example", groups=["it-admins"])
    sign_in(Client(), sso, "bob")
    bob = User.objects.get(username="bob")
    assert bob.is_staff
    sso.put_account("bob", email="bob@northwind.example", groups=["marketing"])
    sign_in(Client(), sso, "bob")
    bob.refresh_from_db()
    assert not Membership.objects.filter(user=bob).exists()
    assert not bob.is_staff  # the mapping made them staff, and took it back


def test_tenants_without_mappings_keep_the_members_staff_gave_them(
    sso: LiveProvider, sales: Tenant, other_tenant: Tenant
) -> None:
    client = Client()
    sign_in(client, sso, "alice")
    alice = User.objects.get(username="alice")
    Membership.objects.create(user=alice, tenant=other_tenant)  # added by hand in the admin
    sign_in(Client(), sso, "alice")
    assert Membership.objects.filter(user=alice, tenant=other_tenant).exists()


def test_a_person_whose_groups_map_to_nothing_signs_in_to_no_tenant(
    sso: LiveProvider, sales: Tenant
) -> None:
    sso.put_account("alice", email="alice@northwind.example", groups=["marketing"])
    client = Client()
    assert sign_in(client, sso, "alice").status_code == 302
    response = client.get("/")
    assert response.status_code == 403  # the chat's page for people without a tenant
    assert b"No workspace yet" in response.content


# --- what a person can act on ------------------------------------------------------------------


def test_declining_consent_gets_a_page_that_says_so(
    sso: LiveProvider, sales: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signin")
    client = Client()
    response = sign_in(client, sso, "alice", consent=False)
    assert response.status_code == 403
    assert b"You did not sign in" in response.content
    assert b"Traceback" not in response.content
    assert signed_in_user(client) is None
    assert "single sign-on failed (denied): access_denied" in caplog.text


def test_a_wrong_client_secret_gets_a_page_for_the_administrator(
    settings: Settings, sso: LiveProvider, sales: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signin")
    configure(settings, sso.issuer, QASSIST_OIDC_CLIENT_SECRET="not-the-secret")
    client = Client()
    response = sign_in(client, sso, "alice")
    assert response.status_code == 502
    assert b"QASSIST_OIDC_CLIENT_SECRET" in response.content
    assert signed_in_user(client) is None
    assert "single sign-on failed (client_rejected): invalid_client" in caplog.text


def test_a_provider_that_does_not_answer_gets_its_page(
    settings: Settings, sales: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signin")
    configure(settings, "http://127.0.0.1:9")  # discard: nothing listens there
    response = Client().get("/accounts/oidc/start/")
    assert response.status_code == 503
    assert b"The sign-in service is not answering" in response.content
    assert "single sign-on failed (unreachable)" in caplog.text


def test_an_issuer_that_is_not_the_providers_gets_its_page(
    settings: Settings, sso: LiveProvider
) -> None:
    configure(settings, sso.issuer.replace("127.0.0.1", "localhost"))
    response = Client().get("/accounts/oidc/start/")
    assert response.status_code == 502
    assert b"not set up correctly" in response.content


def test_a_replayed_callback_is_refused(sso: LiveProvider, sales: Tenant) -> None:
    client = Client()
    start = client.get("/accounts/oidc/start/")
    back = callback_path(authorize(start["Location"], login="alice", back_to=BACK_TO))
    assert client.get(back).status_code == 302
    client.logout()
    again = client.get(back)
    assert again.status_code == 400
    assert b"This sign-in link has expired" in again.content
    assert signed_in_user(client) is None
    stranger = Client()  # someone else's browser, with the stolen link
    assert stranger.get(back).status_code == 400
    assert signed_in_user(stranger) is None


def test_a_forged_id_token_is_refused(
    sso: LiveProvider, sales: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signin")
    sso.tamper_next_id_token(forge=True)
    client = Client()
    response = sign_in(client, sso, "alice")
    assert response.status_code == 400
    assert b"could not be verified" in response.content
    assert signed_in_user(client) is None
    assert not User.objects.filter(username="alice").exists()
    assert "BadSignatureError" in caplog.text


@pytest.mark.parametrize(
    ("claims", "failed"),
    [
        ({"aud": "another-application"}, "aud"),
        # Another client's token naming this one as authorized party: Authlib alone lets it
        # through (it checks the audience only through azp); qassist spells the audience out.
        ({"aud": "another-application", "azp": "qassist"}, "aud"),
        ({"nonce": "the-nonce-of-another-sign-in"}, "nonce"),
        ({"iss": "https://impostor.example"}, "iss"),
        ({"exp": 1_000_000_000}, "expired"),
    ],
)
def test_an_id_token_signed_by_the_provider_for_something_else_is_refused(
    sso: LiveProvider,
    sales: Tenant,
    caplog: pytest.LogCaptureFixture,
    claims: dict[str, Any],
    failed: str,
) -> None:
    caplog.set_level(logging.WARNING, logger="signin")
    sso.tamper_next_id_token(**claims)
    client = Client()
    response = sign_in(client, sso, "alice")
    assert response.status_code == 400
    assert b"could not be verified" in response.content
    assert signed_in_user(client) is None
    assert "single sign-on failed (invalid_token)" in caplog.text
    assert failed in caplog.text


def test_an_account_staff_switched_off_cannot_sign_in(sso: LiveProvider, sales: Tenant) -> None:
    sign_in(Client(), sso, "alice")
    User.objects.filter(username="alice").update(is_active=False)
    client = Client()
    response = sign_in(client, sso, "alice")
    assert response.status_code == 403
    assert b"switched off" in response.content
    assert signed_in_user(client) is None
