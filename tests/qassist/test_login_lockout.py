"""Brute force against the login forms: locked per username and per IP, failures logged."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def small_limit(settings: Settings) -> None:
    settings.AXES_FAILURE_LIMIT = 3


def attempt(path: str, username: str, password: str, ip: str = "198.51.100.7") -> int:
    client = Client(REMOTE_ADDR=ip)
    response = client.post(path, {"username": username, "password": password})
    return response.status_code


@pytest.mark.parametrize("path", LOGIN_PAGES)
def test_a_username_is_locked_after_the_limit_even_from_other_addresses(
    path: str, admin_user: User
) -> None:
    for i in range(2):
        assert attempt(path, "admin", "wrong", ip=f"198.51.100.{i}") == 200  # the form again
    assert attempt(path, "admin", "wrong", ip="198.51.100.2") == 429  # the third: locked
    # The right password no longer helps, from yet another address.
    assert attempt(path, "admin", "password", ip="198.51.100.99") == 429


def test_an_address_is_locked_after_the_limit_whatever_the_username(member: User) -> None:
    for name in ("a", "b"):
        assert attempt("/accounts/login/", name, "wrong", ip="203.0.113.5") == 200
    assert attempt("/accounts/login/", "c", "wrong", ip="203.0.113.5") == 429
    assert attempt("/accounts/login/", "member", PASSWORD, ip="203.0.113.5") == 429
    # Another address logs in as that member fine.
    assert attempt("/accounts/login/", "member", PASSWORD, ip="203.0.113.6") == 302


def test_the_lockout_page_says_what_happened(member: User) -> None:
    for _ in range(3):
        attempt("/accounts/login/", "member", "wrong")
    client = Client(REMOTE_ADDR="198.51.100.7")
    response = client.post("/accounts/login/", {"username": "member", "password": PASSWORD})
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "Content-Security-Policy" in response


def test_a_success_before_the_limit_clears_the_count(member: User) -> None:
    for _ in range(2):
        attempt("/accounts/login/", "member", "wrong")
    assert attempt("/accounts/login/", "member", PASSWORD) == 302
    for _ in range(2):
        assert attempt("/accounts/login/", "member", "wrong") == 200
    assert attempt("/accounts/login/", "member", PASSWORD) == 302


def test_a_failed_login_is_logged(member: User, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="axes"):
        attempt("/accounts/login/", "member", "wrong", ip="192.0.2.44")
    failures = [r for r in caplog.records if "new login failure" in r.getMessage().lower()]
    assert len(failures) == 1
    assert "member" in failures[0].getMessage()
    assert "192.0.2.44" in failures[0].getMessage()
    assert failures[0].levelno == logging.WARNING
