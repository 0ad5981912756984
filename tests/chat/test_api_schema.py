"""schemathesis against /v1/openapi.json, through the ASGI application with the fake engine:
whatever it sends, no 5xx, and every response matches the described status, content type and
schema."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis import checks

from qassist.asgi import application
from tenants.models import ApiKey
from tests.chat.conftest import FakeEngine


@pytest.fixture
def api_schema(settings: Any) -> Any:
    # Loaded through the application itself, once Django's test setup allows its host.
    return schemathesis.openapi.from_asgi("/v1/openapi.json", application)


schema = schemathesis.pytest.from_fixture("api_schema")

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
def test_the_api_keeps_its_description_whatever_it_is_sent(
    case: Any, engine: FakeEngine, api_key: tuple[ApiKey, str]
) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {api_key[1]}"}, checks=CHECKS)
