from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.contrib.sessions.models import Session
from django.db import connection, models
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from chat.batches import BatchRequest, batch_create
from chat.models import (
    Batch,
    CachedReply,
    CachedReplyCandidate,
    ChatSession,
    ContentRead,
    Message,
)
from inference.types import ChatMessage, SamplingParams
from tenants.models import ApiKey, Membership, Tenant, TenantGroup, UsageRecord
from tenants.services import (
    api_key_authenticate,
    api_key_create,
    api_key_revoke,
    tenant_group_create,
)

pytestmark = pytest.mark.django_db

KEY_RE = re.compile(r"qa_[A-Za-z0-9]{8}_[A-Za-z0-9]{32,}")


@pytest.fixture
def one_of_each(
    tenant: Tenant, member: User, api_key: tuple[ApiKey, str]
) -> dict[type[models.Model], models.Model]:
    """A saved object of every model the tenants and chat admins show."""
    session = ChatSession.objects.create(tenant=tenant, user=member, title="Hello")
    return {
        Tenant: tenant,
        Membership: Membership.objects.get(user=member),
        ApiKey: api_key[0],
        UsageRecord: UsageRecord.objects.create(
            tenant=tenant, user=member, api_key=api_key[0], prompt_tokens=12, completion_tokens=3
        ),
        ChatSession: session,
        Message: Message.objects.create(session=session, role="user", content="Hi 你好"),
        CachedReply: CachedReply.objects.create(tenant=tenant, question="Hours?", answer="9-5"),
        CachedReplyCandidate: CachedReplyCandidate.objects.create(
            tenant=tenant, normalized_key="wifi", question="Wifi?", count=3, last_answer="guest"
        ),
        Batch: batch_create(
            tenant=tenant,
            requests=[BatchRequest([ChatMessage("user", "Hi")], SamplingParams(max_tokens=8))],
        ),
        ContentRead: ContentRead.objects.create(
            reader_name="root", tenant=tenant, kind="conversation", session_id=session.id
        ),
        TenantGroup: tenant_group_create(tenant=tenant, name="HR"),
    }


def registered_models() -> list[type[models.Model]]:
    return [model for model in admin.site._registry if model._meta.app_label in {"tenants", "chat"}]


def test_it_covers_every_registered_model() -> None:
    assert set(registered_models()) == {
        Tenant,
        TenantGroup,
        Membership,
        ApiKey,
        UsageRecord,
        ChatSession,
        Message,
        CachedReply,
        CachedReplyCandidate,
        Batch,
        ContentRead,
    }


@pytest.mark.parametrize("model", registered_models(), ids=lambda m: m.__name__)
def test_it_renders_every_admin_page(
    admin_client: Client,
    one_of_each: dict[type[models.Model], models.Model],
    model: type[models.Model],
) -> None:
    info = (model._meta.app_label, model._meta.model_name)
    obj = one_of_each[model]

    assert admin_client.get(reverse("admin:{}_{}_changelist".format(*info))).status_code == 200
    change = reverse("admin:{}_{}_change".format(*info), args=[obj.pk])
    assert admin_client.get(change).status_code == 200
    add = admin_client.get(reverse("admin:{}_{}_add".format(*info)))
    # Usage, candidates, conversations and their reads are recorded by the system, never
    # typed in; a batch is submitted on a page of its own.
    expected = {
        UsageRecord: 403,
        CachedReplyCandidate: 403,
        ChatSession: 403,
        Message: 403,
        ContentRead: 403,
        Batch: 302,
    }.get(model, 200)
    assert add.status_code == expected


def test_it_shows_tenant_usage_today_and_this_month(admin_client: Client, tenant: Tenant) -> None:
    tenant.daily_token_quota = 1000
    tenant.save()
    UsageRecord.objects.create(tenant=tenant, prompt_tokens=1200, completion_tokens=300)
    UsageRecord.objects.create(
        tenant=tenant,
        prompt_tokens=7,
        completion_tokens=0,
        created_at=timezone.now() - timedelta(days=40),
    )
    response = admin_client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    content = response.content.decode()
    assert "usage today" in content.lower()
    assert "usage this month" in content.lower()
    assert "1,500 tokens (1,200 prompt + 300 completion) in 1 requests" in content
    assert "150% of the 1,000 token quota" in content


def test_it_refuses_a_bad_slug_in_the_tenant_form(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:tenants_tenant_add"),
        {
            "name": "Bad",
            "slug": "Bad_Slug",
            "priority": 0,
            "active": "on",
            "memberships-TOTAL_FORMS": 0,
            "memberships-INITIAL_FORMS": 0,
            "group_mappings-TOTAL_FORMS": 0,  # single sign-on's group mappings (superusers)
            "group_mappings-INITIAL_FORMS": 0,
            "knowledge_base-TOTAL_FORMS": 0,  # the knowledge settings inline
            "knowledge_base-INITIAL_FORMS": 0,
            "prompt_suggestions-TOTAL_FORMS": 0,  # the suggestions inline
            "prompt_suggestions-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 200
    assert "not a valid tenant slug" in response.content.decode()
    assert not Tenant.objects.exists()


def test_the_key_add_form_asks_only_tenant_name_expiry_and_what_it_may_read(
    admin_client: Client,
) -> None:
    response = admin_client.get(reverse("admin:tenants_apikey_add"))
    form = response.context["adminform"].form
    assert list(form.fields) == ["tenant", "name", "expires_at", "document_scope", "groups"]


def add_key(client: Client, tenant: Tenant, name: str = "from the admin"):
    return client.post(
        reverse("admin:tenants_apikey_add"),
        {
            "tenant": tenant.pk,
            "name": name,
            "expires_at_0": "",
            "expires_at_1": "",
            "document_scope": "all",
        },
    )


def test_it_shows_a_new_key_once_after_a_redirect_and_stores_only_its_digest(
    admin_client: Client, admin_user: User, tenant: Tenant
) -> None:
    response = add_key(admin_client, tenant)
    # Post/Redirect/Get: the form's answer carries no key, and a reload re-posts nothing.
    key = ApiKey.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:tenants_apikey_created", args=[key.pk])
    assert not KEY_RE.search(response.content.decode())

    shown = admin_client.get(response["Location"])
    assert shown.status_code == 200
    assert "no-store" in shown["Cache-Control"]
    found = KEY_RE.findall(shown.content.decode())
    assert len(set(found)) == 1
    raw = found[0]
    assert f'<code id="new-api-key">{raw}</code>' in shown.content.decode()
    assert 'data-copy-target="new-api-key"' in shown.content.decode()
    assert all(raw not in morsel.value for morsel in shown.cookies.values())
    assert all(raw not in morsel.value for morsel in admin_client.cookies.values())
    assert not list(get_messages(shown.wsgi_request))

    assert api_key_authenticate(raw_key=raw) == key
    assert key.name == "from the admin"
    assert key.created_by == admin_user

    secret = raw.removeprefix(key.prefix + "_")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiKey._meta.db_table}")  # noqa: S608  # no user input
        assert all(secret not in str(cell) for row in cursor.fetchall() for cell in row)
        cursor.execute("SELECT change_message, object_repr FROM django_admin_log")
        assert all(secret not in str(cell) for row in cursor.fetchall() for cell in row)
    # It waited in the session between the POST and this GET; it is gone from it now.
    assert all(secret not in str(s.get_decoded()) for s in Session.objects.all())

    again = admin_client.get(reverse("admin:tenants_apikey_change", args=[key.pk]))
    assert secret not in again.content.decode()
    listing = admin_client.get(reverse("admin:tenants_apikey_changelist"))
    assert secret not in listing.content.decode()


def test_reloading_the_key_page_makes_no_key_and_shows_the_key_no_more(
    admin_client: Client, tenant: Tenant
) -> None:
    response = add_key(admin_client, tenant)
    first = admin_client.get(response["Location"]).content.decode()
    assert len(KEY_RE.findall(first)) == 1
    reloaded = admin_client.get(response["Location"]).content.decode()
    assert KEY_RE.findall(reloaded) == []
    assert "was shown once, when it was made, and cannot be shown again" in reloaded
    assert ApiKey.objects.count() == 1


def test_a_key_left_unseen_for_ten_minutes_is_never_shown(
    admin_client: Client, tenant: Tenant
) -> None:
    response = add_key(admin_client, tenant)
    session = admin_client.session
    stash = session["qassist_new_api_key"]
    session["qassist_new_api_key"] = {**stash, "at": stash["at"] - 601}
    session.save()
    assert KEY_RE.findall(admin_client.get(response["Location"]).content.decode()) == []
    assert "qassist_new_api_key" not in admin_client.session


def test_another_tenants_admin_cannot_open_the_key_page(
    tenant_admin: User, other_admin: User, tenant: Tenant
) -> None:
    ours = Client()
    ours.force_login(tenant_admin)
    response = add_key(ours, tenant)
    theirs = Client()
    theirs.force_login(other_admin)
    assert theirs.get(response["Location"]).status_code == 404
    assert len(KEY_RE.findall(ours.get(response["Location"]).content.decode())) == 1


def test_it_shows_each_keys_status(admin_client: Client, tenant: Tenant) -> None:
    api_key_create(tenant=tenant, name="fresh")
    api_key_create(tenant=tenant, name="stale", expires_at=timezone.now() - timedelta(days=1))
    revoked, _ = api_key_create(tenant=tenant, name="gone")
    api_key_revoke(api_key=revoked)

    url = reverse("admin:tenants_apikey_changelist")
    content = admin_client.get(url).content.decode()
    for status in ("active", "expired", "revoked"):
        assert f'<td class="field-status">{status}</td>' in content

    for status, name in (("active", "fresh"), ("expired", "stale"), ("revoked", "gone")):
        response = admin_client.get(url, {"status": status})
        assert [key.name for key in response.context["cl"].result_list] == [name]


def test_it_revokes_selected_keys(admin_client: Client, tenant: Tenant) -> None:
    first, first_raw = api_key_create(tenant=tenant, name="first")
    second, _ = api_key_create(tenant=tenant, name="second")
    kept, kept_raw = api_key_create(tenant=tenant, name="kept")

    response = admin_client.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke_selected", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Revoked 2 API key(s)." in response.content.decode()
    assert api_key_authenticate(raw_key=first_raw) is None
    assert api_key_authenticate(raw_key=kept_raw) == kept
    second.refresh_from_db()
    assert second.revoked_at is not None


def test_it_leaves_already_revoked_keys_as_they_were(admin_client: Client, tenant: Tenant) -> None:
    old, _ = api_key_create(tenant=tenant, name="old")
    long_ago = timezone.now() - timedelta(days=10)
    api_key_revoke(api_key=old, at=long_ago)

    response = admin_client.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke_selected", "_selected_action": [old.pk]},
        follow=True,
    )

    assert "1 already revoked" in response.content.decode()
    old.refresh_from_db()
    assert old.revoked_at == long_ago


def test_the_revoke_action_is_offered(admin_client: Client, api_key: tuple[ApiKey, str]) -> None:
    response = admin_client.get(reverse("admin:tenants_apikey_changelist"))
    assert "Revoke selected keys" in response.content.decode()


@pytest.mark.parametrize("label", ["chat.CachedReplyCandidate", "knowledge.Document"])
def test_a_tenant_column_shows_only_to_those_who_see_several_tenants(
    rf: RequestFactory, admin_user: User, tenant_admin: User, other_tenant: Tenant, label: str
) -> None:
    """Candidates and documents hide their tenant column from a tenant admin of one tenant
    (the same on every row), not from a superuser, who sees every tenant's."""
    model_admin = admin.site._registry[apps.get_model(label)]

    def columns(user: User) -> list[object]:
        request = rf.get("/admin/")
        request.user = user
        return list(model_admin.get_list_display(request))

    assert "tenant" in columns(admin_user)
    assert "tenant" not in columns(tenant_admin)
    other_tenant.memberships.create(user=tenant_admin, role=Membership.Role.ADMIN)
    assert "tenant" in columns(User.objects.get(pk=tenant_admin.pk))  # two tenants: shown
