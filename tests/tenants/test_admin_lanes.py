"""Tenant admins in their own lane: the admin as seen by four personas.

superuser (sees everything), tenant admin of acme (`tenant_admin`), member of acme (`member`,
no staff account), staff of globex (`other_admin`, a tenant admin there).
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import models
from django.test import Client
from django.urls import reverse

from chat.models import CachedReply, CachedReplyCandidate, ChatSession, Message
from tenants.models import ApiKey, Membership, Tenant, UsageRecord
from tenants.services import api_key_create

pytestmark = pytest.mark.django_db

SCOPED_MODELS: list[type[models.Model]] = [
    Tenant,
    Membership,
    ApiKey,
    ChatSession,
    Message,
    CachedReply,
    CachedReplyCandidate,
    UsageRecord,
]


def url(model: type[models.Model], view: str, *args: object) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def populate(tenant: Tenant, person: User, word: str) -> dict[type[models.Model], models.Model]:
    """One object of every scoped model for `tenant`; `word` appears in each one's text."""
    session = ChatSession.objects.create(tenant=tenant, user=person, title=f"{word} chat")
    key, _ = api_key_create(tenant=tenant, name=f"{word} key")
    return {
        Tenant: tenant,
        Membership: Membership.objects.get(user=person, tenant=tenant),
        ApiKey: key,
        ChatSession: session,
        Message: Message.objects.create(session=session, role="user", content=f"{word} hello"),
        CachedReply: CachedReply.objects.create(
            tenant=tenant, question=f"{word} hours?", answer="9-5"
        ),
        UsageRecord: UsageRecord.objects.create(tenant=tenant, user=person, prompt_tokens=3),
        CachedReplyCandidate: CachedReplyCandidate.objects.create(
            tenant=tenant, normalized_key=f"{word} wifi", question=f"{word} wifi?", count=5
        ),
    }


@pytest.fixture
def acme_objects(tenant, tenant_admin, member):
    return populate(tenant, member, "acmeword")


@pytest.fixture
def globex_objects(other_tenant, other_admin):
    return populate(other_tenant, other_admin, "globexword")


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_a_superuser_sees_every_tenants_rows(admin_client, acme_objects, globex_objects, model):
    response = admin_client.get(url(model, "changelist"))
    shown = {obj.pk for obj in response.context["cl"].result_list}
    assert {acme_objects[model].pk, globex_objects[model].pk} <= shown


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_a_tenant_admin_sees_only_their_tenants_rows_and_never_the_other_tenants_name(
    tenant_admin, acme_objects, globex_objects, model
):
    response = client_for(tenant_admin).get(url(model, "changelist"))
    assert response.status_code == 200
    shown = {obj.pk for obj in response.context["cl"].result_list}
    assert acme_objects[model].pk in shown
    assert globex_objects[model].pk not in shown
    content = response.content.decode().lower()
    assert "globex" not in content  # the tenant filter included
    assert "acme" in content


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_another_tenants_object_is_not_found_like_one_that_never_existed(
    tenant_admin, acme_objects, globex_objects, model
):
    client = client_for(tenant_admin)
    theirs = client.get(url(model, "change", globex_objects[model].pk), follow=True)
    missing_pk = "00000000-0000-0000-0000-000000000000" if model is ChatSession else 987654
    missing = client.get(url(model, "change", missing_pk), follow=True)
    assert theirs.redirect_chain == [(reverse("admin:index"), 302)]
    assert missing.redirect_chain == [(reverse("admin:index"), 302)]
    assert "globex" not in theirs.content.decode().lower()
    # and their own is there
    assert client.get(url(model, "change", acme_objects[model].pk)).status_code == 200


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_staff_of_the_other_tenant_sees_none_of_acme(
    other_admin, acme_objects, globex_objects, model
):
    response = client_for(other_admin).get(url(model, "changelist"))
    shown = {obj.pk for obj in response.context["cl"].result_list}
    assert shown == {globex_objects[model].pk}
    assert "acme" not in response.content.decode().lower()


def test_a_member_without_a_staff_account_is_sent_to_the_login_page(member, acme_objects):
    response = client_for(member).get(url(Tenant, "changelist"))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_a_staff_account_that_administers_no_tenant_sees_nothing(member, acme_objects):
    member.is_staff = True
    member.save()
    client = client_for(member)
    index = client.get(reverse("admin:index"))
    assert index.context["app_list"] == []
    for model in SCOPED_MODELS:
        assert client.get(url(model, "changelist")).status_code == 403


def test_foreign_key_choices_offer_only_their_tenants(tenant_admin, tenant, other_tenant):
    client = client_for(tenant_admin)
    form = client.get(url(ApiKey, "add")).context["adminform"].form
    assert list(form.fields["tenant"].queryset) == [tenant]
    response = client.get(
        reverse("admin:autocomplete"),
        {"app_label": "tenants", "model_name": "apikey", "field_name": "tenant", "term": ""},
    )
    assert [row["text"] for row in response.json()["results"]] == ["Acme"]


def test_a_forged_post_cannot_make_a_key_for_another_tenant(tenant_admin, other_tenant):
    response = client_for(tenant_admin).post(
        url(ApiKey, "add"),
        {"tenant": other_tenant.pk, "name": "sneaky", "expires_at_0": "", "expires_at_1": ""},
    )
    assert response.status_code == 200  # the form again, with an error
    assert not ApiKey.objects.filter(tenant=other_tenant).exists()


def test_a_conversation_page_offers_no_field_to_change(tenant_admin, acme_objects):
    # A record of what was said: no owner, tenant or message to pick (a select of messages
    # would list every tenant's), no Save button.
    session = acme_objects[ChatSession]
    page = client_for(tenant_admin).get(url(ChatSession, "change", session.pk))
    assert page.context["adminform"].form.fields == {}
    assert 'name="_save"' not in page.content.decode()


def tenant_form_data(tenant: Tenant, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": tenant.name,
        "slug": tenant.slug,
        "priority": tenant.priority,
        "system_prompt": tenant.system_prompt,
        "requests_per_minute": tenant.requests_per_minute or "",
        "tokens_per_minute": "",
        "max_concurrent_streams": "",
        "daily_token_quota": tenant.daily_token_quota or "",
        "monthly_token_quota": "",
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "group_mappings-TOTAL_FORMS": 0,  # single sign-on's group mappings (superusers)
        "group_mappings-INITIAL_FORMS": 0,
        "knowledge_base-TOTAL_FORMS": 0,  # the knowledge settings inline
        "knowledge_base-INITIAL_FORMS": 0,
        "prompt_suggestions-TOTAL_FORMS": 0,  # the suggestions inline
        "prompt_suggestions-INITIAL_FORMS": 0,
    }
    if tenant.active:
        data["active"] = "on"
    data.update(changes)
    return data


def test_a_tenant_admin_edits_the_name_but_cannot_raise_limits_or_priority(tenant_admin, tenant):
    tenant.requests_per_minute = 10
    tenant.save()
    response = client_for(tenant_admin).post(
        url(Tenant, "change", tenant.pk),
        tenant_form_data(
            tenant, name="Acme Corp", requests_per_minute=100000, priority=9, active=""
        ),
    )
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.name == "Acme Corp"
    assert tenant.requests_per_minute == 10
    assert tenant.priority == 0
    assert tenant.active


def test_a_tenant_admin_can_neither_add_nor_delete_tenants(tenant_admin, tenant):
    client = client_for(tenant_admin)
    assert client.get(url(Tenant, "add")).status_code == 403
    assert client.get(url(Tenant, "delete", tenant.pk)).status_code == 403


def test_a_superusers_limit_change_is_logged_with_the_field_and_both_values(
    admin_client, tenant, tenant_admin, other_admin
):
    response = admin_client.post(
        url(Tenant, "change", tenant.pk),
        tenant_form_data(tenant, requests_per_minute=120, name="Acme"),
    )
    assert response.status_code == 302
    entry = LogEntry.objects.get(object_id=str(tenant.pk), action_flag=2)
    assert entry.user.is_superuser
    assert entry.get_change_message() == "Changed Requests per minute (no limit → 120)."

    trail = client_for(tenant_admin).get(reverse("admin:admin_logentry_changelist"))
    assert entry in trail.context["cl"].result_list
    theirs = client_for(other_admin).get(reverse("admin:admin_logentry_changelist"))
    assert entry not in theirs.context["cl"].result_list


def test_the_audit_trail_is_read_only(admin_client, tenant):
    admin_client.post(url(Tenant, "change", tenant.pk), tenant_form_data(tenant, priority=3))
    entry = LogEntry.objects.get()
    assert admin_client.get(reverse("admin:admin_logentry_add")).status_code == 403
    page = admin_client.get(reverse("admin:admin_logentry_change", args=[entry.pk]))
    assert page.status_code == 200
    assert "Priority (0 → 3)" in page.content.decode()
    assert admin_client.get(
        reverse("admin:admin_logentry_delete", args=[entry.pk])
    ).status_code in (
        403,
        302,
    )
    assert LogEntry.objects.filter(pk=entry.pk).exists()


def test_a_superuser_deactivates_tenants_in_bulk_and_it_is_logged(
    admin_client, tenant, other_tenant
):
    response = admin_client.post(
        url(Tenant, "changelist"),
        {"action": "deactivate_selected", "_selected_action": [tenant.pk, other_tenant.pk]},
        follow=True,
    )
    assert "Deactivated 2 tenant(s)." in response.content.decode()
    assert not Tenant.objects.filter(active=True).exists()
    messages = {e.get_change_message() for e in LogEntry.objects.all()}
    assert messages == {"Changed Active (yes → no)."}


def test_a_tenant_admin_is_not_offered_deactivation(tenant_admin, tenant):
    client = client_for(tenant_admin)
    page = client.get(url(Tenant, "changelist")).content.decode()
    assert "deactivate_selected" not in page
    client.post(
        url(Tenant, "changelist"),
        {"action": "deactivate_selected", "_selected_action": [tenant.pk]},
    )
    tenant.refresh_from_db()
    assert tenant.active


def test_a_tenant_admin_disables_their_cached_replies_but_not_anyone_elses(
    tenant_admin, acme_objects, globex_objects
):
    ours, theirs = acme_objects[CachedReply], globex_objects[CachedReply]
    response = client_for(tenant_admin).post(
        url(CachedReply, "changelist"),
        {"action": "disable_selected", "_selected_action": [ours.pk, theirs.pk]},
        follow=True,
    )
    assert "Disabled 1 cached reply(ies)." in response.content.decode()
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert not ours.enabled
    assert theirs.enabled


def test_a_tenant_admin_revokes_only_their_keys(tenant_admin, acme_objects, globex_objects):
    ours, theirs = acme_objects[ApiKey], globex_objects[ApiKey]
    client_for(tenant_admin).post(
        url(ApiKey, "changelist"),
        {"action": "revoke_selected", "_selected_action": [ours.pk, theirs.pk]},
    )
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert ours.revoked_at is not None
    assert theirs.revoked_at is None


def test_a_tenant_admin_adds_a_member_by_exact_username(tenant_admin, tenant, outsider):
    client = client_for(tenant_admin)
    add = client.get(url(Membership, "add")).content.decode()
    assert "outsider" not in add  # no list of accounts
    bad = client.post(
        url(Membership, "add"), {"user": "nobody", "tenant": tenant.pk, "role": "member"}
    )
    assert "There is no active account with this username." in bad.content.decode()
    ok = client.post(
        url(Membership, "add"), {"user": "outsider", "tenant": tenant.pk, "role": "member"}
    )
    assert ok.status_code == 302
    assert Membership.objects.filter(user=outsider, tenant=tenant).exists()


def test_a_tenant_admin_cannot_make_a_reply_for_every_tenant(tenant_admin, tenant):
    client = client_for(tenant_admin)
    response = client.post(
        url(CachedReply, "add"),
        {"tenant": "", "question": "Wifi?", "answer": "guest", "enabled": "on"},
    )
    assert response.status_code == 200
    assert not CachedReply.objects.exists()
    client.post(
        url(CachedReply, "add"),
        {"tenant": tenant.pk, "question": "Wifi?", "answer": "guest", "enabled": "on"},
    )
    assert CachedReply.objects.get().tenant == tenant


def test_a_tenant_admin_sees_their_sessions_messages_but_not_their_text(tenant_admin, acme_objects):
    # The text needs the tenant's content audit (tests/chat/test_privacy.py).
    session = acme_objects[ChatSession]
    page = client_for(tenant_admin).get(url(ChatSession, "change", session.pk)).content.decode()
    assert "User message #" in page
    assert "acmeword hello" not in page
