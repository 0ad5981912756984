"""A tenant's models in the admin (issue #36): its default and the others its members may
pick, among the models this deployment serves (QASSIST_MODELS); superusers decide."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from tenants.models import Tenant
from tenants.services import ModelNotAllowed, tenant_model_choose, tenant_models
from tests.tenants.test_admin_lanes import client_for, tenant_form_data, url

pytestmark = pytest.mark.django_db

SMALL = "qwen2.5-coder-0.5b"
LARGE = "qwen2.5-coder-1.5b"


@pytest.fixture(autouse=True)
def two_models(settings: Settings) -> None:
    settings.QASSIST_MODEL = SMALL
    settings.QASSIST_MODELS = [SMALL, LARGE]


def test_a_superuser_sets_the_default_model_and_the_models_members_may_pick(
    admin_client: Client, tenant: Tenant
) -> None:
    response = admin_client.post(
        url(Tenant, "change", tenant.pk),
        tenant_form_data(tenant, default_model=LARGE, allowed_models=[SMALL]),
    )

    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.default_model == LARGE
    assert tenant.allowed_models == [SMALL]
    assert tenant_models(tenant=tenant) == [LARGE, SMALL]


def test_the_form_offers_only_the_models_this_deployment_serves(
    admin_client: Client, tenant: Tenant
) -> None:
    response = admin_client.post(
        url(Tenant, "change", tenant.pk),
        tenant_form_data(tenant, default_model="qwen2.5-coder-7b", allowed_models=["gpt-4o"]),
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "qwen2.5-coder-7b is not one of the available choices" in str(errors["default_model"])
    assert "gpt-4o is not one of the available choices" in str(errors["allowed_models"])
    tenant.refresh_from_db()
    assert tenant.default_model == ""


def test_a_tenant_admin_sees_the_models_but_cannot_change_them(
    tenant_admin: User, tenant: Tenant
) -> None:
    response = client_for(tenant_admin).post(
        url(Tenant, "change", tenant.pk),
        tenant_form_data(tenant, name="Acme Corp", default_model=LARGE, allowed_models=[LARGE]),
    )

    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.name == "Acme Corp"
    assert tenant.default_model == ""
    assert tenant.allowed_models == []


def test_without_a_choice_a_tenant_uses_the_deployments_default_only(tenant: Tenant) -> None:
    assert tenant_model_choose(tenant=tenant) == SMALL
    assert tenant_model_choose(tenant=tenant, requested=SMALL) == SMALL
    with pytest.raises(ModelNotAllowed, match=f"'{LARGE}' is not available to this tenant"):
        tenant_model_choose(tenant=tenant, requested=LARGE)


def test_a_model_the_deployment_stopped_serving_is_left_out(
    tenant: Tenant, settings: Settings
) -> None:
    tenant.default_model = LARGE
    tenant.allowed_models = [SMALL]
    tenant.save()
    settings.QASSIST_MODELS = [SMALL]

    assert tenant_models(tenant=tenant) == [SMALL]
