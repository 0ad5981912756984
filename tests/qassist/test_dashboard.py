"""The admin's home as a dashboard (issue #31 point 9): the tenants in scope with their
members, documents by status, usage today, open feedback and the engine's health; a first-steps
checklist for a new tenant, each step read from the database; and what a staff account without
a tenant is told. Counts only: no message text reaches the page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from feedback.models import Feedback
from inference.service import set_engine_client
from knowledge.models import Document
from qassist.dashboard import TenantFacts, TenantPanel, engine_summary, first_steps
from signin.models import GroupMapping
from sources.models import Source
from tenants.models import ApiKey, Membership, Tenant, UsageRecord
from tenants.services import api_key_create
from tests.feedback.test_admin import rated
from tests.qassist.test_healthz import FakeEngineClient

pytestmark = pytest.mark.django_db

INDEX = reverse("admin:index")


@pytest.fixture(autouse=True)
def engine() -> Iterator[FakeEngineClient]:
    fake = FakeEngineClient(
        {
            "mode": "embedded",
            "ok": True,
            "workers": [{"id": "embedded", "running": 2, "waiting": 3}],
            "models": ["smollm2"],
        }
    )
    set_engine_client(fake)
    yield fake
    set_engine_client(None)


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def panels(response) -> dict[str, TenantPanel]:
    return {p.tenant.slug: p for p in response.context["dashboard"]["panels"]}


def steps_done(panel: TenantPanel) -> dict[str, bool]:
    return {step.key: step.done for step in panel.steps}


def document(tenant: Tenant, status: str, session=None) -> Document:
    return Document.objects.create(
        tenant=tenant,
        session=session,
        title=f"{status} doc",
        filename="d.txt",
        kind="text",
        size=1,
        status=status,
    )


# --- the rules, without the database ---------------------------------------------------------


def test_a_new_tenant_has_every_first_step_left() -> None:
    assert [done for _, _, done in first_steps(TenantFacts())] == [False] * 4


def test_each_first_step_is_done_by_either_of_its_ways() -> None:
    def done(**facts: object) -> dict[str, bool]:
        return {key: ok for key, _, ok in first_steps(TenantFacts(**facts))}  # type: ignore[arg-type]

    assert done(plain_members=1)["members"]
    assert done(group_mappings=1)["members"]
    assert not done(members=1)["members"]  # its admin alone is no member yet
    assert done(documents={"failed": 1})["documents"]
    assert done(sources=1)["documents"]
    assert done(limits_set=True)["limits"]
    assert done(api_keys=1)["api_key"]


def test_the_engine_is_summed_over_its_workers_and_says_why_it_is_down() -> None:
    up = engine_summary(
        {"ok": True, "mode": "redis", "workers": [{"running": 1, "waiting": 2}, {"waiting": 4}]}
    )
    assert (up["ok"], up["running"], up["waiting"], up["workers"]) == (True, 1, 6, 2)
    down = engine_summary({"ok": False, "error": "the engine has been in one step for 90 s"})
    assert not down["ok"]
    assert down["problem"] == "the engine has been in one step for 90 s"


# --- the page ----------------------------------------------------------------------------------


def test_a_superuser_sees_every_tenant_above_the_sections(admin_client, tenant, other_tenant):
    response = admin_client.get(INDEX)
    assert list(panels(response)) == ["acme", "globex"]
    html = response.content.decode()
    assert html.index('id="dashboard"') < html.index('id="section-people"')


def test_a_tenant_admin_sees_only_their_tenant(tenant_admin, other_tenant):
    response = client_for(tenant_admin).get(INDEX)
    assert list(panels(response)) == ["acme"]
    assert "Globex" not in response.content.decode()


def test_the_numbers_of_a_tenant_are_counted_from_the_database(
    tenant_admin, tenant, member, other_tenant, outsider
):
    for status in ["ready", "ready", "queued", "indexing", "failed"]:
        document(tenant, status)
    document(other_tenant, "failed")
    rated(member, tenant, "Where is the handbook?", "Here.", "down", reason="wrong")
    rated(member, tenant, "And the holidays?", "25 days.", "up")
    old = rated(member, tenant, "Old question", "Old answer.", "down")
    Feedback.objects.filter(message=old.reply).update(updated_at=timezone.now() - timedelta(days=8))
    UsageRecord.objects.all().delete()  # the replies rated above wrote theirs: ours only
    UsageRecord.objects.create(
        tenant=tenant, user=member, prompt_tokens=100, completion_tokens=20, ttft_ms=900
    )
    UsageRecord.objects.create(tenant=tenant, user=member, prompt_tokens=10, ttft_ms=1500)
    UsageRecord.objects.create(tenant=other_tenant, user=outsider, prompt_tokens=999)

    response = client_for(tenant_admin).get(INDEX)
    acme = panels(response)["acme"]
    assert acme.facts.members == 2  # the owner and the member
    assert (acme.documents_ready, acme.documents_queued, acme.documents_failed) == (2, 2, 1)
    assert acme.facts.down_votes == 1  # this week's; the up-vote and last month's are not open
    assert acme.usage["requests"] == 2
    assert acme.usage["total_tokens"] == 130
    assert acme.usage["ttft_p95"] is not None
    html = response.content.decode()
    assert "130 tokens" in html
    assert "2 ready" in html
    assert "1 failed" in html
    assert "1 down-vote" in html
    # Counts only: the texts of the questions and answers rated never reach the home.
    assert "handbook" not in html.lower()
    assert "25 days" not in html


def test_the_engines_health_is_the_one_healthz_reads(admin_client, tenant, engine):
    html = admin_client.get(INDEX).content.decode()
    assert "2 writing, 3 waiting" in html
    engine.report = {
        "mode": "embedded",
        "ok": True,
        "workers": [{"id": "embedded", "stalled": True, "step_running_seconds": 95}],
    }
    html = admin_client.get(INDEX).content.decode()
    assert "down: the engine has been in one step for 95 s" in html


def test_an_embedded_engine_not_started_is_not_started_by_the_home(admin_client, settings):
    set_engine_client(None)
    settings.REDIS_URL = ""
    settings.QASSIST_ENGINE = "auto"
    response = admin_client.get(INDEX)
    assert response.context["dashboard"]["engine"]["started"] is False
    assert "not started in this process yet" in response.content.decode()
    from inference import service

    assert service._client is None


def test_a_new_tenant_gets_a_checklist_with_a_link_for_each_step(tenant_admin, tenant):
    response = client_for(tenant_admin).get(INDEX)
    acme = panels(response)["acme"]
    assert steps_done(acme) == dict.fromkeys(["members", "documents", "limits", "api_key"], False)
    links = {step.key: [link.url for link in step.links] for step in acme.steps}
    # A tenant admin adds members, documents and keys, and sets the tenant's limits; mapping
    # identity-provider groups is a superuser's, so it is not offered.
    assert links["members"] == [f"{reverse('admin:tenants_membership_add')}?tenant={tenant.pk}"]
    assert links["documents"] == [
        reverse("admin:knowledge_document_upload"),
        f"{reverse('admin:sources_source_add')}?tenant={tenant.pk}",
    ]
    assert links["api_key"] == [f"{reverse('admin:tenants_apikey_add')}?tenant={tenant.pk}"]
    client = client_for(tenant_admin)
    for urls in links.values():
        for url in urls:
            assert client.get(url).status_code == 200, url
    assert "First steps: 4 of 4 left" in response.content.decode()


def test_a_superuser_is_also_offered_to_map_a_group(admin_client, tenant):
    acme = panels(admin_client.get(INDEX))["acme"]
    members = next(step for step in acme.steps if step.key == "members")
    assert [link.text for link in members.links] == ["Add a member", "Map a group"]


def test_each_step_is_checked_off_and_the_checklist_goes_when_all_are_done(
    tenant_admin, tenant, member
):
    client = client_for(tenant_admin)
    acme = panels(client.get(INDEX))["acme"]
    assert steps_done(acme)["members"] is True
    assert acme.steps[0].links == ()  # nothing to link once done
    Source.objects.create(tenant=tenant, name="HR share", kind="folder", location="/srv/hr")
    Tenant.objects.filter(pk=tenant.pk).update(daily_token_quota=100_000)
    acme = panels(client.get(INDEX))["acme"]
    assert steps_done(acme) == {
        "members": True,
        "documents": True,
        "limits": True,
        "api_key": False,
    }
    assert "First steps: 1 of 4 left" in client.get(INDEX).content.decode()
    api_key_create(tenant=tenant, name="helpdesk bot", created_by=tenant_admin)
    response = client.get(INDEX)
    assert not panels(response)["acme"].show_checklist
    assert "First steps" not in response.content.decode()


def test_a_group_mapping_and_an_uploaded_document_count_as_first_steps(admin_client, tenant):
    GroupMapping.objects.create(tenant=tenant, group="sales", role=Membership.Role.MEMBER)
    document(tenant, "queued")
    acme = panels(admin_client.get(INDEX))["acme"]
    assert steps_done(acme)["members"]
    assert steps_done(acme)["documents"]


def test_a_file_attached_to_a_conversation_is_not_a_tenant_document(admin_client, tenant, member):
    turn = rated(member, tenant, "Summarise this", "Sure.", "up")
    document(tenant, "ready", session=turn.session)
    acme = panels(admin_client.get(INDEX))["acme"]
    assert acme.documents_ready == 0
    assert not steps_done(acme)["documents"]


def test_the_home_reads_a_fixed_number_of_queries_whatever_the_tenants(
    admin_client, django_assert_max_num_queries
):
    for i in range(3):
        Tenant.objects.create(slug=f"t{i}", name=f"T{i}")
    with django_assert_max_num_queries(40) as few:
        admin_client.get(INDEX)
    for i in range(3, 12):
        Tenant.objects.create(slug=f"t{i}", name=f"T{i}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        admin_client.get(INDEX)


# --- a staff account without a tenant ----------------------------------------------------------


def test_staff_without_a_tenant_are_told_who_gives_a_workspace_and_how(db):
    User.objects.create_superuser(
        "root", "root@example.com", "x", first_name="Ruth", last_name="Ops"
    )
    staff = User.objects.create_user("newstaff", password="x", is_staff=True)
    response = client_for(staff).get(INDEX)
    assert response.status_code == 200
    assert "dashboard" not in response.context
    html = response.content.decode()
    assert "Your staff account runs no workspace yet" in html
    assert "Tenant admin" in html
    assert "Ruth Ops &lt;root@example.com&gt;" in html
    assert "There is nothing here for your account" not in html


def test_staff_without_a_tenant_and_no_superuser_are_told_how_to_make_one(db):
    staff = User.objects.create_user("newstaff", password="x", is_staff=True)
    html = client_for(staff).get(INDEX).content.decode()
    assert "createsuperuser" in html


def test_the_chat_tells_staff_without_a_tenant_where_to_go(db):
    staff = User.objects.create_user("newstaff", password="x", is_staff=True)
    response = client_for(staff).get(reverse("chat:index"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "No workspace yet" in html
    assert f'href="{INDEX}"' in html
    root = User.objects.create_superuser("root", "root@example.com", "x")
    html = client_for(root).get(reverse("chat:index")).content.decode()
    assert f'href="{reverse("admin:tenants_tenant_add")}"' in html


def test_a_member_without_staff_gets_no_admin_link_on_the_no_workspace_page(db):
    person = User.objects.create_user("someone", password="x")
    html = client_for(person).get(reverse("chat:index")).content.decode()
    assert "No workspace yet" in html
    assert 'id="no-tenant-staff"' not in html


def test_api_keys_count_for_the_checklist_whoever_made_them(admin_client, tenant):
    api_key_create(tenant=tenant, name="bot", created_by=None)
    assert ApiKey.objects.filter(tenant=tenant).count() == 1
    acme = panels(admin_client.get(INDEX))["acme"]
    assert steps_done(acme)["api_key"]
