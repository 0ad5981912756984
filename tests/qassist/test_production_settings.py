"""QASSIST_HTTPS=1: the one switch for a site served over HTTPS behind a TLS proxy."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from pytest_django import Settings

from inference.service import set_engine_client
from tests import needs
from tests.qassist.test_healthz import FakeEngineClient

REPO = Path(__file__).resolve().parents[2]


def deploy_check(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "QASSIST_HTTPS"}}
    env.update(
        QASSIST_VAR_DIR=str(tmp_path),
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="chat.example.com",
        **extra,
    )
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    # Fixed arguments: this interpreter running the repository's own manage.py.
    return subprocess.run(  # noqa: S603
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_manage_py_check_deploy_is_clean_with_the_switch_on(tmp_path: Path) -> None:
    # Clean includes the model being there (qassist.W001 otherwise): the tests' own model.
    model = needs.embedded_model()
    done = deploy_check(
        tmp_path,
        QASSIST_HTTPS="1",
        QASSIST_MODEL=needs.EMBEDDED_MODEL,
        QASSIST_MODELS_DIR=str(model.parent),
    )
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


def test_without_the_switch_check_deploy_names_what_is_missing(tmp_path: Path) -> None:
    done = deploy_check(tmp_path)
    assert done.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in done.stderr


@pytest.fixture
def https(settings: Settings) -> None:
    """What QASSIST_HTTPS=1 sets, applied to this test's settings."""
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SESSION_COOKIE_SECURE = True


@pytest.mark.django_db
def test_behind_the_proxy_plain_http_is_redirected_and_https_is_served(
    client: Client, https: None
) -> None:
    plain = client.get("/accounts/login/")
    assert plain.status_code == 301
    assert plain["Location"] == "https://testserver/accounts/login/"
    proxied = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
    assert proxied.status_code == 200
    assert "max-age=31536000" in proxied["Strict-Transport-Security"]
    assert "connect-src 'self' wss://testserver" in proxied["Content-Security-Policy"]


@pytest.mark.django_db
def test_the_health_check_is_not_redirected_for_load_balancers(
    client: Client, https: None, settings: Settings
) -> None:
    settings.REDIS_URL = ""
    set_engine_client(FakeEngineClient())
    try:
        response = client.get("/healthz")
    finally:
        set_engine_client(None)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
