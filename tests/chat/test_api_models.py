"""REST with several models (issue #36): `model` is honoured within what the tenant allows,
each model answered by its own engine (fake runners that sign with their model's name)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from pytest_django import Settings

from chat.api import schemas
from chat.models import Message
from inference.local import RoutedEngineClient
from inference.service import get_engine_client
from tenants.models import ApiKey, Tenant, UsageRecord
from tenants.services import api_key_create
from tests.chat.conftest import LARGE, SMALL
from tests.chat.test_api import error_of, headers, post
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)


def ask(content: str, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def allow(tenant: Tenant, *, default: str = "", others: list[str] | None = None) -> None:
    tenant.default_model = default
    tenant.allowed_models = others or []
    tenant.save()


async def model_ids(raw_key: str) -> list[str]:
    response = await AsyncClient().get("/v1/models", headers=headers(raw_key))
    assert response.status_code == 200
    return [m.id for m in schemas.ModelList.model_validate(response.json()).data]


async def test_models_lists_only_the_models_the_keys_tenant_may_use(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str]
) -> None:
    ids = await model_ids(api_key[1])

    assert SMALL in ids
    assert LARGE not in ids  # served, but not this tenant's


async def test_models_lists_the_tenants_default_first_then_the_others_it_may_use(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    await sync_to_async(allow)(tenant, default=LARGE, others=[SMALL])

    ids = await model_ids(api_key[1])

    assert ids[:2] == [LARGE, SMALL]  # then the embedding model
    assert len(ids) == 3


async def test_models_leaves_out_the_tenants_model_while_no_engine_serves_it(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    await sync_to_async(allow)(tenant, others=[LARGE])
    client = get_engine_client()
    assert isinstance(client, RoutedEngineClient)
    client.clients[LARGE].load_error = "the model file is missing"

    ids = await model_ids(api_key[1])
    response = await post(api_key[1], ask("hi", LARGE))

    assert LARGE not in ids
    assert SMALL in ids
    assert response.status_code == 404
    assert error_of(response)["code"] == "model_not_found"


async def test_two_tenants_keys_see_their_own_models(
    runners: dict[str, FakeRunner],
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
    other_tenant: Tenant,
) -> None:
    await sync_to_async(allow)(other_tenant, default=LARGE)
    _key, other_raw = await sync_to_async(api_key_create)(tenant=other_tenant, name="globex")

    assert (await model_ids(api_key[1]))[0] == SMALL
    assert LARGE not in await model_ids(api_key[1])
    assert (await model_ids(other_raw))[0] == LARGE
    assert SMALL not in await model_ids(other_raw)


async def test_a_tenant_allowed_the_large_model_gets_it_when_it_asks(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    await sync_to_async(allow)(tenant, others=[LARGE])

    large = await post(api_key[1], ask("hi", LARGE))
    small = await post(api_key[1], ask("hello", SMALL))

    assert large.status_code == 200, large.content
    body = schemas.ChatCompletion.model_validate(large.json())
    assert body.model == LARGE
    assert body.choices[0].message.content == f"{LARGE}: hi"
    assert list(runners[LARGE].prompts.values()) == ["hi"]
    assert schemas.ChatCompletion.model_validate(small.json()).model == SMALL
    assert list(runners[SMALL].prompts.values()) == ["hello"]


async def test_a_model_the_tenant_may_not_use_is_a_400_and_runs_nothing(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str]
) -> None:
    response = await post(api_key[1], ask("hi", LARGE))

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "model_not_allowed"
    assert error["param"] == "model"
    assert f"'{LARGE}' is not available to this tenant" in error["message"]
    assert runners[LARGE].prompts == {}


async def test_a_model_nobody_serves_is_a_404_naming_only_what_the_tenant_may_use(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str]
) -> None:
    response = await post(api_key[1], ask("hi", "qwen2.5-coder-7b"))

    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert error["message"].endswith(f"this tenant may use '{SMALL}'.")
    assert LARGE not in error["message"]  # served, but another tenant's business


async def test_a_tenant_whose_default_is_the_large_model_may_still_be_refused_the_small(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    await sync_to_async(allow)(tenant, default=LARGE)

    large = await post(api_key[1], ask("hi", LARGE))
    small = await post(api_key[1], ask("hi", SMALL))

    assert large.status_code == 200
    assert small.status_code == 400
    assert error_of(small)["code"] == "model_not_allowed"


async def test_the_reply_and_its_usage_record_name_the_model_that_answered(
    runners: dict[str, FakeRunner], api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    await sync_to_async(allow)(tenant, others=[LARGE])

    response = await post(api_key[1], ask("hi", LARGE))
    completion_id = response.json()["id"]
    detail = await AsyncClient().get(
        f"/v1/chat/completions/{completion_id}", headers=headers(api_key[1])
    )

    reply = await sync_to_async(Message.objects.get)(role="assistant")
    record = await sync_to_async(UsageRecord.objects.get)()
    assert reply.model == LARGE
    assert record.model == LARGE
    assert detail.json()["model"] == LARGE


# --- QASSIST_MODEL_TOKEN_WEIGHTS: a request of the heavier model meets a limit sooner -------


def limit_tenant(tenant: Tenant, **limits: int) -> None:
    tenant.allowed_models = [LARGE]
    for name, value in limits.items():
        setattr(tenant, name, value)
    tenant.save()


# A limit of 299 tokens and max_tokens 100: the 0.5B's request (its prompt + 100) fits, the
# 1.5B's, counted 3 times, is 300 or more whatever its prompt.
LIMIT = 299


@pytest.mark.parametrize(
    ("limit", "code", "fragment"),
    [
        ("tokens_per_minute", "rate_limit_exceeded", "each counted 3 times for its model"),
        ("daily_token_quota", "insufficient_quota", "daily quota"),
    ],
)
async def test_the_heavier_models_request_meets_the_limit_the_lighter_ones_fits(
    settings: Settings,
    runners: dict[str, FakeRunner],
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
    limit: str,
    code: str,
    fragment: str,
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = f"{LARGE}=3"
    await sync_to_async(limit_tenant)(tenant, **{limit: LIMIT})

    large = await post(api_key[1], {**ask("hi", LARGE), "max_tokens": 100})
    small = await post(api_key[1], {**ask("hi", SMALL), "max_tokens": 100})

    assert small.status_code == 200, small.content
    assert large.status_code == 429
    error = error_of(large)
    assert error["code"] == code
    assert fragment in error["message"]
    assert runners[LARGE].batches == []  # never reached its engine


async def test_unweighed_both_models_requests_fit_the_same_limit(
    settings: Settings,
    runners: dict[str, FakeRunner],
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
) -> None:
    settings.QASSIST_MODEL_TOKEN_WEIGHTS = ""
    await sync_to_async(limit_tenant)(tenant, tokens_per_minute=LIMIT)

    large = await post(api_key[1], {**ask("hi", LARGE), "max_tokens": 100})

    assert large.status_code == 200, large.content
    assert schemas.ChatCompletion.model_validate(large.json()).model == LARGE
