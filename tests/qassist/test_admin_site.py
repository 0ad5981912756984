"""The admin as a product: qassist's name, an index grouped by what staff do, human labels,
read-only pages without Save buttons, and a way from the chat to the admin for staff."""

from __future__ import annotations

import re

import pytest
from axes.models import AccessAttempt
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession
from qassist.admin_site import AdminLink, AdminSection, group_app_list
from tenants.models import Membership, Tenant, UsageRecord

pytestmark = pytest.mark.django_db


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sections(response) -> list[tuple[str, list[str]]]:
    return [
        (app["name"], [row["name"] for row in app["models"]])
        for app in response.context["app_list"]
    ]


def test_the_admin_is_called_qassist_not_django(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "qassist admin" in page
    assert "Django administration" not in page
    assert "Django site admin" not in page
    assert "<title>Run qassist | qassist admin</title>" in page


def test_a_superusers_index_is_grouped_by_what_staff_do(admin_client):
    response = admin_client.get(reverse("admin:index"))
    assert sections(response) == [
        (
            "Tenants and people",
            [
                "Tenants",
                "Members",
                "Users",
                "Groups",
                "Tenant groups",
                "API keys",
                "Group mappings",
                "Tenant group mappings",
                "Identities",
            ],
        ),
        (
            "Knowledge and cached replies",
            ["Documents", "Sources", "Cached replies", "Cached reply candidates"],
        ),
        ("Feedback", ["Feedback: what to improve", "Feedback"]),
        ("Usage", ["Usage at a glance", "Usage records", "Batches"]),
        (
            "Conversations and audit",
            ["Conversations", "Messages", "Content reads", "Admin history"],
        ),
        ("Engine and sign-ins", ["Engine status", "Login lockouts", "Failed logins", "Logins"]),
    ]
    page = response.content.decode()
    assert not re.search(r">\s*Axes\s*<", page, re.IGNORECASE)  # no section called Axes
    assert f'href="{reverse("admin:tenants_usagerecord_dashboard")}"' in page
    assert f'href="{reverse("engine_status")}"' in page


def test_a_tenant_admin_sees_their_sections_only(tenant_admin):
    response = client_for(tenant_admin).get(reverse("admin:index"))
    assert sections(response) == [
        ("Tenants and people", ["Tenants", "Members", "Tenant groups", "API keys"]),
        (
            "Knowledge and cached replies",
            ["Documents", "Sources", "Cached replies", "Cached reply candidates"],
        ),
        ("Feedback", ["Feedback: what to improve", "Feedback"]),
        ("Usage", ["Usage at a glance", "Usage records", "Batches"]),
        (
            "Conversations and audit",
            ["Conversations", "Messages", "Content reads", "Admin history"],
        ),
        ("Engine and sign-ins", ["Engine status"]),
    ]


def test_a_model_joins_a_section_with_one_line_and_nothing_unlisted_is_hidden(rf, admin_user):
    request = rf.get("/admin/")
    request.user = admin_user
    apps = [
        {
            "app_label": "knowledge",
            "models": [
                {"name": "Documents", "object_name": "Document"},
                {"name": "Chunks", "object_name": "Chunk"},
            ],
        }
    ]
    link = AdminLink("status", "Status", "admin:index", "a page", lambda request: True)
    grouped = group_app_list(
        request,
        apps,
        sections=(AdminSection("knowledge", "Knowledge", (link, ("knowledge", "document"))),),
    )
    assert [(s["name"], [m["name"] for m in s["models"]]) for s in grouped] == [
        ("Knowledge", ["Status", "Documents"]),
        ("Other", ["Chunks"]),
    ]
    assert grouped[0]["app_url"] == "/admin/#section-knowledge"


def test_columns_are_labelled_for_people(admin_client, tenant):
    UsageRecord.objects.create(tenant=tenant, prompt_tokens=3)
    page = admin_client.get(reverse("admin:tenants_usagerecord_changelist")).content.decode()
    assert "API key" in page
    assert "Api key" not in page
    assert "From the cache" in page


@pytest.mark.parametrize(
    "url_name",
    [
        "admin:tenants_usagerecord_change",
        "admin:admin_logentry_change",
        "admin:axes_accessattempt_change",
    ],
)
def test_read_only_pages_have_no_save_button(admin_client, tenant, url_name):
    objects = {
        "admin:tenants_usagerecord_change": lambda: UsageRecord.objects.create(tenant=tenant),
        "admin:admin_logentry_change": lambda: LogEntry.objects.create(
            user=User.objects.get(username="admin"), action_flag=1, object_repr="x"
        ),
        "admin:axes_accessattempt_change": lambda: AccessAttempt.objects.create(
            username="someone", ip_address="10.0.0.1", failures_since_start=3
        ),
    }
    obj = objects[url_name]()
    page = admin_client.get(reverse(url_name, args=[obj.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="_save"' not in html
    assert 'name="_continue"' not in html


def test_login_lockouts_are_listed_under_a_human_name_and_can_be_lifted(admin_client):
    attempt = AccessAttempt.objects.create(
        username="someone", ip_address="10.0.0.1", failures_since_start=10
    )
    page = admin_client.get(reverse("admin:axes_accessattempt_changelist")).content.decode()
    assert "Login lockouts" in page
    assert "Engine and sign-ins" in page  # the breadcrumbs name the home's section
    admin_client.post(
        reverse("admin:axes_accessattempt_delete", args=[attempt.pk]), {"post": "yes"}
    )
    assert not AccessAttempt.objects.exists()


def test_tenant_admins_do_not_see_login_records(tenant_admin):
    client = client_for(tenant_admin)
    assert client.get(reverse("admin:axes_accessattempt_changelist")).status_code == 403


def test_staff_find_the_admin_from_the_chat(tenant_admin, member, admin_user, tenant):
    Membership.objects.create(user=admin_user, tenant=tenant)
    admin_url = reverse("admin:index")
    for user in (tenant_admin, admin_user):
        page = client_for(user).get(reverse("chat:index")).content.decode()
        assert f'id="admin-link" href="{admin_url}"' in page
    assert 'id="admin-link"' not in client_for(member).get(reverse("chat:index")).content.decode()


def test_a_staff_account_with_no_tenant_to_run_gets_no_admin_link(member):
    member.is_staff = True
    member.save()
    page = client_for(member).get(reverse("chat:index")).content.decode()
    assert 'id="admin-link"' not in page


def test_every_page_keeps_its_url_name(admin_client, tenant):
    # The site replaces Django's default one: URL names stay "admin:..."
    assert reverse("admin:tenants_tenant_changelist") == "/admin/tenants/tenant/"
    assert admin_client.get(reverse("admin:app_list", args=["tenants"])).status_code == 200
    assert ChatSession._meta.verbose_name_plural == "conversations"
    assert Tenant._meta.get_field("active").help_text


def breadcrumbs(response) -> list[str]:
    html = response.content.decode()
    crumbs = re.search(r'<div class="breadcrumbs">(.*?)</div>', html, re.S)
    assert crumbs is not None
    return [
        re.sub(r"<[^>]+>", "", part).strip()
        for part in crumbs.group(1).replace("&rsaquo;", "›").split("›")
    ]


def test_breadcrumbs_name_the_sections_of_the_admin_home(admin_client, tenant, member):
    # Issue #31: the lists said "Company knowledge" or "Chat" where the home says
    # "Knowledge and cached replies" or "Conversations and audit".
    session = ChatSession.objects.create(tenant=tenant, user=member, title="Hello")
    pages = {
        reverse("admin:knowledge_document_changelist"): [
            "Home",
            "Knowledge and cached replies",
            "Documents",
        ],
        reverse("admin:knowledge_document_upload"): [
            "Home",
            "Knowledge and cached replies",
            "Documents",
            "Upload documents",
        ],
        reverse("admin:chat_chatsession_change", args=[session.pk]): [
            "Home",
            "Conversations and audit",
            "Conversations",
            str(session),
        ],
        reverse("admin:axes_accessattempt_changelist"): [
            "Home",
            "Engine and sign-ins",
            "Login lockouts",
        ],
    }
    home = admin_client.get(reverse("admin:index")).content.decode()
    for url, expected in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert breadcrumbs(response) == expected, url
        assert f">{expected[1]}<" in home  # the home's own name for the section
    page = admin_client.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert 'href="/admin/#section-knowledge">Knowledge and cached replies</a>' in page
