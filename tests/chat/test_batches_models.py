"""Batches with several models (issue #36): each line's `model` is honoured as chat completions
honour it, checked per line when the batch is submitted and again when its item runs; each
item is answered by its model's engine (fake runners that sign with their model's name)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat import batches
from chat.models import Batch, BatchItem
from tenants.models import ApiKey, Tenant, UsageRecord
from tests.chat.conftest import LARGE, SMALL
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)


def line(text: str, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 64}


def submit(client: Client, api_key: tuple[ApiKey, str], requests: list[dict[str, Any]]) -> Any:
    return client.post(
        "/v1/batches",
        {"requests": requests},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key[1]}",
    )


def results(client: Client, api_key: tuple[ApiKey, str], batch_id: str) -> list[dict[str, Any]]:
    response = client.get(
        f"/v1/batches/{batch_id}/results", HTTP_AUTHORIZATION=f"Bearer {api_key[1]}"
    )
    body = response.getvalue().decode()
    return [json.loads(row) for row in body.splitlines()]


def allow_large(tenant: Tenant) -> None:
    tenant.allowed_models = [LARGE]
    tenant.save()


def test_each_line_is_answered_by_the_model_it_names(
    client: Client,
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
    runners: dict[str, FakeRunner],
    batch_dispatches: list[object],
) -> None:
    allow_large(tenant)
    response = submit(
        client, api_key, [line("one", SMALL), line("two", LARGE), line("three", SMALL)]
    )
    assert response.status_code == 201, response.content

    assert batches.batch_run(batch_id=Batch.objects.get().id) == "completed"

    rows = results(client, api_key, response.json()["id"])
    assert [r["response"]["model"] for r in rows] == [SMALL, LARGE, SMALL]
    assert [r["response"]["choices"][0]["message"]["content"] for r in rows] == [
        f"{SMALL}: one",
        f"{LARGE}: two",
        f"{SMALL}: three",
    ]
    assert sorted(runners[SMALL].prompts.values()) == ["one", "three"]
    assert list(runners[LARGE].prompts.values()) == ["two"]
    usage = UsageRecord.objects.filter(reason="batch").order_by("model")
    assert sorted(usage.values_list("model", flat=True)) == sorted([SMALL, SMALL, LARGE])


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [(LARGE, 400, "model_not_allowed"), ("qwen2.5-coder-7b", 404, "model_not_found")],
)
def test_a_line_naming_a_model_the_tenant_cannot_use_refuses_the_batch_naming_the_line(
    client: Client,
    api_key: tuple[ApiKey, str],
    runners: dict[str, FakeRunner],
    batch_dispatches: list[object],
    model: str,
    status: int,
    code: str,
) -> None:
    response = submit(client, api_key, [line("one", SMALL), line("two", model)])

    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["param"] == "requests[1].model"
    assert error["message"].startswith(f"requests[1]: The model '{model}'")
    assert LARGE not in error["message"].split("may use")[-1]  # only the tenant's are named
    assert not Batch.objects.exists()


def test_a_jsonl_line_naming_a_model_nobody_serves_is_named_by_its_line_number(
    client: Client,
    api_key: tuple[ApiKey, str],
    runners: dict[str, FakeRunner],
    batch_dispatches: list[object],
) -> None:
    body = "\n".join(json.dumps(x) for x in [line("one", SMALL), line("two", "gpt-4o")])
    response = client.post(
        "/v1/batches",
        body,
        content_type="application/jsonl",
        HTTP_AUTHORIZATION=f"Bearer {api_key[1]}",
    )

    assert response.status_code == 404
    assert response.json()["error"]["param"] == "line 2.model"
    assert not Batch.objects.exists()


def test_an_item_whose_model_the_tenant_lost_meanwhile_fails_alone(
    client: Client,
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
    runners: dict[str, FakeRunner],
    batch_dispatches: list[object],
) -> None:
    allow_large(tenant)
    response = submit(client, api_key, [line("one", LARGE), line("two", SMALL)])
    assert response.status_code == 201
    tenant.allowed_models = []  # an admin takes the large model away before the batch runs
    tenant.save()

    assert batches.batch_run(batch_id=Batch.objects.get().id) == "completed"

    items = list(BatchItem.objects.order_by("index"))
    assert [i.status for i in items] == ["failed", "done"]
    assert items[0].error_code == "model_not_allowed"
    assert runners[LARGE].prompts == {}
    rows = results(client, api_key, response.json()["id"])
    assert rows[0]["error"]["code"] == "model_not_allowed"
    assert rows[1]["response"]["model"] == SMALL
