"""Errors answered in the caller's language (JSON or a page), the database down as a 503, one
log line for junk anyone can send, and the Content-Security-Policy on every page."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from chat.models import ChatSession
from chat.services import sessions
from chat.services.sessions import session_create
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

JSON = {"Accept": "application/json"}


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def error_of(response: Any) -> dict[str, str]:
    assert response["Content-Type"] == "application/json"
    error: dict[str, str] = response.json()["error"]
    return error


# --- JSON endpoints answer every error in JSON ---------------------------------------------------


def test_an_unknown_session_on_the_messages_endpoint_is_a_json_404(
    member: User, tenant: Tenant
) -> None:
    response = logged_in(member).get(reverse("chat:messages", args=[uuid.uuid4()]))
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_someone_elses_session_on_the_messages_endpoint_is_a_json_404(
    member: User, owner: User, tenant: Tenant
) -> None:
    theirs = ChatSession.objects.create(user=owner, tenant=tenant, title="private")
    response = logged_in(member).get(reverse("chat:messages", args=[theirs.id]))
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert "private" not in response.content.decode()


def test_a_wrong_method_on_a_json_endpoint_is_a_json_405(member: User, tenant: Tenant) -> None:
    response = logged_in(member).post(reverse("chat:session_list"))
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert response["Allow"] == "GET"


def test_a_malformed_id_in_a_json_url_is_a_json_404_for_a_json_caller(member: User) -> None:
    response = logged_in(member).get("/c/not-a-uuid/messages", headers=JSON)
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_missing_csrf_token_is_a_json_403_for_a_json_caller(member: User, tenant: Tenant) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    session = ChatSession.objects.create(user=member, tenant=tenant, title="t")
    response = client.post(
        reverse("chat:session_rename", args=[session.id]),
        '{"title": "x"}',
        content_type="application/json",
        headers=JSON,
    )
    assert response.status_code == 403
    assert error_of(response)["code"] == "csrf_failed"


def test_people_still_get_an_html_404_page(member: User) -> None:
    response = logged_in(member).get("/no/such/page", HTTP_ACCEPT="text/html,*/*")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert "Not found" in response.content.decode()


# --- the database down ---------------------------------------------------------------------------


@pytest.fixture
def database_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: Any) -> Any:
        raise OperationalError('connection to server at "db" (10.0.0.5), port 5432 failed')

    monkeypatch.setattr(sessions, "sessions_for_user", refuse)


def test_a_page_answers_503_with_a_clear_page_when_the_database_is_down(
    member: User, tenant: Tenant, database_down: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        response = logged_in(member).get(reverse("chat:index"))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    body = response.content.decode()
    assert "cannot reach its database" in body
    assert "10.0.0.5" not in body  # no internals for the visitor
    assert "Traceback" not in caplog.text
    assert "database unavailable for GET /" in caplog.text


def test_a_json_endpoint_answers_503_json_when_the_database_is_down(
    member: User, tenant: Tenant, database_down: None
) -> None:
    response = logged_in(member).get(reverse("chat:session_list"), headers=JSON)
    assert response.status_code == 503
    assert error_of(response)["code"] == "database_unavailable"


# --- junk anyone can send: one warning line, no traceback ---------------------------------------


@pytest.fixture
def security_log() -> Iterator[io.StringIO]:
    handler = next(
        h for h in logging.getLogger("django.security").handlers if h.get_name() == "security"
    )
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


def test_a_bad_host_header_is_a_400_and_one_warning_line(
    client: Client, security_log: io.StringIO
) -> None:
    response = client.get("/accounts/login/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    lines = security_log.getvalue().splitlines()
    assert len(lines) == 1
    assert "WARNING django.security.DisallowedHost" in lines[0]
    assert "evil.example" in lines[0]


def test_too_many_form_fields_is_a_400_and_one_warning_line(
    client: Client, security_log: io.StringIO, settings: Settings
) -> None:
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    response = client.post("/accounts/login/", {f"f{i}": "x" for i in range(50)})
    assert response.status_code == 400
    lines = security_log.getvalue().splitlines()
    assert len(lines) == 1
    assert "WARNING django.security.TooManyFieldsSent" in lines[0]


def test_a_form_over_the_upload_limit_is_a_413_page_not_a_500(
    client: Client, security_log: io.StringIO
) -> None:
    response = client.post(
        "/accounts/login/",
        b"username=a&password=" + b"x" * (3 * 2**20),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 413
    assert "too large" in response.content.decode()
    assert "Content-Security-Policy" in response


def test_a_json_body_over_the_upload_limit_is_a_json_413(member: User, tenant: Tenant) -> None:
    session = session_create(user=member, tenant=tenant)
    client = logged_in(member)
    body = b'{"title": "' + b"x" * (3 * 2**20) + b'"}'
    response = client.post(
        reverse("chat:session_rename", args=[session.id]),
        body,
        content_type="application/json",
        headers=JSON,
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"title": "\\ud800"}', "surrogate"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
    ],
)
def test_json_the_server_cannot_use_is_a_json_400(
    member: User, tenant: Tenant, body: bytes, says: str
) -> None:
    session = session_create(user=member, tenant=tenant)
    response = logged_in(member).post(
        reverse("chat:session_rename", args=[session.id]),
        body,
        content_type="application/json",
        headers=JSON,
    )
    assert response.status_code == 400
    assert error_of(response)["code"] == "bad_json"
    assert says in error_of(response)["message"]


# --- the Content-Security-Policy on every HTML page ---------------------------------------------


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/", "/no/such/page"])
def test_every_page_carries_the_content_security_policy(client: Client, path: str) -> None:
    response = client.get(path)
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "connect-src 'self' ws://testserver;" in policy
    assert "wss:" not in policy


def test_the_chat_page_carries_it_too(member: User, tenant: Tenant) -> None:
    response = logged_in(member).get(reverse("chat:index"))
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_under_https_websockets_are_allowed_over_wss_only(client: Client) -> None:
    response = client.get("/accounts/login/", secure=True)
    policy = response["Content-Security-Policy"]
    assert "connect-src 'self' wss://testserver;" in policy
    assert "ws://" not in policy


# --- the OpenAI-compatible API keeps OpenAI's error shape ----------------------------------------


def test_a_database_outage_under_the_api_is_an_openai_style_503(rf: Any) -> None:
    from qassist.middleware import database_unavailable

    response = database_unavailable(rf.get("/v1/models"), OperationalError("gone"))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    error = json.loads(response.content)["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "database_unavailable"
