"""Brute force against the login forms, and the attack on the lockout itself: one address can
lock a username from that address only, never everywhere, and never for longer by trying on."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db.models import F
from django.test import Client
from pytest_django import Settings

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]
A = "198.51.100.7"  # the attacker's address
B = "203.0.113.20"  # the colleague's desk


def attempt(path: str, username: str, password: str, ip: str = A, **headers: str) -> int:
    client = Client(REMOTE_ADDR=ip)
    response = client.post(path, {"username": username, "password": password}, headers=headers)
    return response.status_code


def earlier(**delta: float) -> None:
    """As if every failure counted so far had happened `delta` earlier."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(**delta))


@pytest.mark.parametrize("path", LOGIN_PAGES)
def test_ten_wrong_passwords_from_one_address_do_not_lock_the_user_out_elsewhere(
    path: str, member: User, admin_user: User
) -> None:
    username = "admin" if path.startswith("/admin") else "member"
    password = "password" if username == "admin" else PASSWORD
    for _ in range(9):
        assert attempt(path, username, "wrong") == 200  # the form again
    assert attempt(path, username, "wrong") == 429  # the tenth: locked, from A
    assert attempt(path, username, password) == 429  # even the right password, from A

    assert attempt(path, username, password, ip=B) == 302  # the colleague logs in


def test_attempts_during_a_lockout_do_not_extend_it(member: User) -> None:
    for _ in range(10):
        attempt("/accounts/login/", "member", "wrong")
    before = AccessAttempt.objects.get()
    earlier(minutes=10)

    # The attacker keeps trying every few minutes: each is refused and counts for nothing.
    for _ in range(3):
        assert attempt("/accounts/login/", "member", "wrong") == 429
        earlier(minutes=1)
    after = AccessAttempt.objects.get()
    assert after.failures_since_start == before.failures_since_start == 10
    assert after.attempt_time == before.attempt_time - timedelta(minutes=13)

    earlier(minutes=2, seconds=1)  # 15 minutes and a second after the tenth failure
    assert attempt("/accounts/login/", "member", PASSWORD) == 302


def test_an_address_trying_many_usernames_is_locked_after_its_own_limit(
    member: User, settings: Settings
) -> None:
    settings.QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT = 5
    for name in ("a", "b", "c", "d"):
        assert attempt("/accounts/login/", name, "wrong") == 200
    assert attempt("/accounts/login/", "e", "wrong") == 429
    assert attempt("/accounts/login/", "member", PASSWORD) == 429  # anyone, from A
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302


def test_an_office_behind_one_address_is_not_locked_by_a_few_typos(member: User) -> None:
    for name in ("owner", "member", "alice", "bob", "carol"):
        assert attempt("/accounts/login/", name, "wrong") == 200
    assert attempt("/accounts/login/", "member", PASSWORD) == 302


def test_a_username_failing_from_many_addresses_is_slowed_there_only(member: User) -> None:
    botnet = [f"192.0.2.{i}" for i in range(1, 11)]
    for ip in botnet:  # one guess each: no pair, no address near its limit
        assert attempt("/accounts/login/", "member", "wrong", ip=ip) == 200

    # Under attack: an address that failed waits for the username's slow lane ...
    client = Client(REMOTE_ADDR=botnet[0])
    response = client.post("/accounts/login/", {"username": "member", "password": "wrong"})
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 10
    assert AccessAttempt.objects.filter(ip_address=botnet[0]).get().failures_since_start == 1
    # ... while the colleague, at an address that never failed, logs in at once.
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302

    earlier(seconds=11)  # the lane is free again: one more guess
    assert attempt("/accounts/login/", "member", "wrong", ip=botnet[0]) == 200
    assert attempt("/accounts/login/", "member", "wrong", ip=botnet[1]) == 429


def test_the_owners_own_address_keeps_its_own_lane_while_attackers_hold_the_shared_one(
    member: User,
) -> None:
    """Issue #32: an attacker guessing every 4 s from fresh addresses kept the owner, who had
    mistyped once, out for 60 s and more; the owner got in only from a new address."""
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302  # B: the owner's desk
    botnet = [f"192.0.2.{i}" for i in range(1, 200)]
    fresh = iter(botnet[1:])
    assert attempt("/accounts/login/", "member", "wrong", ip=botnet[0]) == 200
    for _ in range(9):
        assert attempt("/accounts/login/", "member", "wrong", ip=next(fresh)) == 200
    assert attempt("/accounts/login/", "member", "wrong", ip=B) == 200  # the owner mistypes
    for _ in range(4):  # 16 s of the attack: a fresh address every 4 s keeps the lane shut
        earlier(seconds=4)
        assert attempt("/accounts/login/", "member", "wrong", ip=next(fresh)) == 200
        assert attempt("/accounts/login/", "member", "wrong", ip=botnet[0]) == 429
    # 16 s after the owner's own typo, the owner's own lane is free: in at once.
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302


def test_the_owners_own_lane_still_waits_after_its_own_typo(member: User) -> None:
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302
    for i in range(10):
        assert attempt("/accounts/login/", "member", "wrong", ip=f"192.0.2.{i + 1}") == 200
    assert attempt("/accounts/login/", "member", "wrong", ip=B) == 200
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 429  # its own 10 s
    earlier(seconds=11)
    assert attempt("/accounts/login/", "member", PASSWORD, ip=B) == 302


def test_the_lockout_page_says_how_long_and_who_can_lift_it(member: User) -> None:
    for _ in range(10):
        attempt("/accounts/login/", "member", "wrong")
    client = Client(REMOTE_ADDR=A)
    response = client.post("/accounts/login/", {"username": "member", "password": PASSWORD})
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins to this account from this address." in page
    assert "paused for 15 minutes" in page
    assert "administrator" in page
    assert "do not make the pause longer" in page
    assert 14 * 60 < int(response["Retry-After"]) <= 15 * 60
    assert "Content-Security-Policy" in response


def test_a_fetch_call_hears_of_a_lockout_in_json(member: User) -> None:
    for _ in range(10):
        attempt("/accounts/login/", "member", "wrong")
    client = Client(REMOTE_ADDR=A)
    response = client.post(
        "/accounts/login/",
        {"username": "member", "password": PASSWORD},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "login_locked"
    assert "Retry-After" in response


def test_staff_lift_a_lock_with_axes_reset_username(member: User) -> None:
    for _ in range(10):
        attempt("/accounts/login/", "member", "wrong")
    assert attempt("/accounts/login/", "member", PASSWORD) == 429
    call_command("axes_reset_username", "member")
    assert attempt("/accounts/login/", "member", PASSWORD) == 302


def test_a_success_before_the_limit_clears_the_count(member: User, settings: Settings) -> None:
    settings.AXES_FAILURE_LIMIT = 3
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
