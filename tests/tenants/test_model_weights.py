"""What a model's tokens count for in quotas and tokens-per-minute limits (issue #36,
QASSIST_MODEL_TOKEN_WEIGHTS): a 1.5B token may count three 0.5B tokens; unset, every model's
count once, as before."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from tenants.limits import Limiter
from tenants.models import Tenant, UsageRecord
from tenants.services import (
    Principal,
    limits_plan,
    limits_reserve,
    limits_settle,
    model_token_weight,
    parse_model_token_weights,
    usage_tokens_in_period,
)
from tests.chat.conftest import LARGE, SMALL


def test_weights_are_read_as_name_equals_weight() -> None:
    assert parse_model_token_weights(" qwen2.5-coder-1.5b=3 , smollm2-135m=0.5,") == {
        "qwen2.5-coder-1.5b": 3.0,
        "smollm2-135m": 0.5,
    }
    assert parse_model_token_weights("") == {}


@pytest.mark.parametrize("raw", ["qwen2.5-coder-1.5b", "x=0", "x=-2", "x=three", "=3", "x=nan"])
def test_a_malformed_weight_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(ValueError, match="is not name=weight"):
        parse_model_token_weights(raw)


def test_a_model_without_a_weight_and_usage_without_a_model_count_once(
    settings: Settings,
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=3"
    assert model_token_weight(LARGE) == 3.0
    assert model_token_weight(SMALL) == 1.0
    assert model_token_weight("") == 1.0  # embeddings, records from before #36


def test_a_malformed_setting_is_a_system_error_and_counts_every_model_once(
    settings: Settings,
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=heavy"
    errors = [m for m in run_checks() if m.id == "qassist.E008"]
    assert len(errors) == 1
    assert "'qwen2.5-coder-1.5b=heavy'" in errors[0].msg
    assert model_token_weight(LARGE) == 1.0


@pytest.mark.django_db
def test_a_plan_reserves_and_settles_the_models_tokens_times_its_weight(
    settings: Settings, tenant: Tenant, fresh_limits: Limiter
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=3"
    tenant.daily_token_quota = 10_000
    principal = Principal(tenant=tenant)

    def plan(model: str) -> Any:
        return limits_plan(
            principal=principal,
            tenant=tenant,
            request_id=uuid.uuid4().hex,
            tokens=100,
            model=model,
        )

    large, small = plan(LARGE), plan(SMALL)
    assert (large.tokens, small.tokens) == (300, 100)
    assert limits_reserve(plan=large) is None
    assert limits_reserve(plan=small) is None
    assert fresh_limits.snapshot(large)["day_tokens"] == 400
    limits_settle(plan=large, used_tokens=41)  # counted 123
    limits_settle(plan=small, used_tokens=41)
    snapshot = fresh_limits.snapshot(large)
    assert snapshot["day_tokens"] == 123 + 41
    assert snapshot["tokens_in_window"] == 123 + 41


@pytest.mark.django_db
def test_the_quota_counter_is_seeded_with_each_models_recorded_tokens_weighed(
    settings: Settings, tenant: Tenant
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=3"
    UsageRecord.objects.create(tenant=tenant, model=LARGE, prompt_tokens=10, completion_tokens=5)
    UsageRecord.objects.create(tenant=tenant, model=SMALL, prompt_tokens=10, completion_tokens=5)
    UsageRecord.objects.create(tenant=tenant, model="", prompt_tokens=7)  # embeddings

    assert usage_tokens_in_period(tenant_id=tenant.pk, period="day") == 45 + 15 + 7


def test_unset_every_models_tokens_count_once(settings: Settings, db: None) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = ""
    tenant = Tenant.objects.create(slug="plain")
    UsageRecord.objects.create(tenant=tenant, model=LARGE, prompt_tokens=10, completion_tokens=5)
    assert usage_tokens_in_period(tenant_id=tenant.pk, period="day") == 15


def test_the_usage_page_shows_each_models_weight_and_quota_tokens(
    settings: Settings, admin_client: Client, tenant: Tenant
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=3"
    UsageRecord.objects.create(
        tenant=tenant, model=LARGE, prompt_tokens=1000, completion_tokens=234
    )
    UsageRecord.objects.create(tenant=tenant, model=SMALL, prompt_tokens=500)
    tenant.daily_token_quota = 10_000
    tenant.save()

    response = admin_client.get(reverse("admin:tenants_tenant_usage", args=[tenant.pk]))

    page = response.content.decode()
    table = page.split('class="usage-table usage-model"')[1].split("</table>")[0]
    assert ">Weight</th><th>Quota tokens</th>" in table
    large_row = table.split(f"<td>{LARGE}</td>")[1].split("</tr>")[0]
    assert "<td>3</td><td>3,702</td>" in large_row
    small_row = table.split(f"<td>{SMALL}</td>")[1].split("</tr>")[0]
    assert "<td>1</td><td>500</td>" in small_row
    assert "4,202 of 10,000 tokens" in page  # the quota bar counts weighed tokens
    assert "qwen2.5-coder-1.5b × 3" in page
