"""Group mappings in the admin: superusers edit them (on the tenant's page too); tenant admins,
whose own role a mapping decides, never see them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from signin.models import GroupMapping, Identity
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


def test_a_superuser_maps_a_group_to_a_tenant(admin_client: Client, tenant: Tenant) -> None:
    response = admin_client.post(
        reverse("admin:signin_groupmapping_add"),
        {"tenant": tenant.pk, "group": "sales", "role": "admin"},
    )
    assert response.status_code == 302, response.content
    mapping = GroupMapping.objects.get()
    assert (mapping.tenant, mapping.group, mapping.role) == (tenant, "sales", "admin")


def test_the_tenant_page_shows_its_group_mappings_to_superusers(
    admin_client: Client, tenant: Tenant
) -> None:
    GroupMapping.objects.create(tenant=tenant, group="sales-emea", role="member")
    page = admin_client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    assert page.status_code == 200
    assert "members from identity-provider groups" in page.content.decode().lower()
    assert "sales-emea" in page.content.decode()


def test_tenant_admins_never_see_group_mappings(tenant: Tenant, tenant_admin: User) -> None:
    GroupMapping.objects.create(tenant=tenant, group="sales-emea", role="member")
    client = Client()
    client.force_login(tenant_admin)
    page = client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    assert page.status_code == 200
    assert "sales-emea" not in page.content.decode()
    assert client.get(reverse("admin:signin_groupmapping_changelist")).status_code == 403
    assert client.get(reverse("admin:signin_identity_changelist")).status_code == 403
    assert "Group mappings" not in client.get(reverse("admin:index")).content.decode()


def test_identities_are_records_nobody_edits(admin_client: Client, member: User) -> None:
    identity = Identity.objects.create(user=member, issuer="https://idp.example", subject="m-1")
    page = admin_client.get(reverse("admin:signin_identity_change", args=[identity.pk]))
    assert page.status_code == 200
    assert "m-1" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
