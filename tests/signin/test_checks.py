"""Single sign-on's configuration problems are system checks with stable ids."""

from __future__ import annotations

import pytest
from django.core.checks import CheckMessage
from pytest_django import Settings

from signin.checks import check_single_sign_on


def ids(messages: list[CheckMessage]) -> list[str]:
    return [str(message.id) for message in messages]


def configure(settings: Settings, issuer: str = "https://login.example.com/realms/staff") -> None:
    settings.QASSIST_OIDC_ISSUER = issuer
    settings.QASSIST_OIDC_CLIENT_ID = "qassist"


def test_no_provider_at_all_is_fine() -> None:
    assert check_single_sign_on() == []


def test_a_complete_configuration_passes(settings: Settings) -> None:
    configure(settings)
    assert check_single_sign_on() == []


@pytest.mark.parametrize(
    "issuer",
    ["http://login.example.com", "login.example.com", "https://", "https://x.example/?a=1"],
)
def test_an_issuer_that_is_not_an_https_url_is_an_error(settings: Settings, issuer: str) -> None:
    configure(settings, issuer)
    assert ids(check_single_sign_on()) == ["signin.E001"]


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:8080", "http://localhost:9000/realm"])
def test_plain_http_is_allowed_on_the_machine_itself(settings: Settings, issuer: str) -> None:
    configure(settings, issuer)
    assert check_single_sign_on() == []


def test_an_issuer_without_a_client_id_is_an_error(settings: Settings) -> None:
    configure(settings)
    settings.QASSIST_OIDC_CLIENT_ID = ""
    messages = check_single_sign_on()
    assert ids(messages) == ["signin.E002"]
    assert "QASSIST_OIDC_CLIENT_ID" in messages[0].msg


def test_a_client_id_without_an_issuer_is_an_error(settings: Settings) -> None:
    settings.QASSIST_OIDC_CLIENT_ID = "qassist"
    assert ids(check_single_sign_on()) == ["signin.E002"]


def test_scopes_without_openid_are_an_error(settings: Settings) -> None:
    configure(settings)
    settings.QASSIST_OIDC_SCOPES = "profile email"
    assert ids(check_single_sign_on()) == ["signin.E003"]


def test_a_malformed_duration_is_named_as_written(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QASSIST_OIDC_RECHECK_SECONDS", "15m")
    settings.QASSIST_OIDC_RECHECK_SECONDS = -1  # what env_int makes of it
    settings.QASSIST_OIDC_TIMEOUT_SECONDS = 0.0
    messages = check_single_sign_on()
    assert ids(messages) == ["signin.E004", "signin.E004"]
    assert "'15m'" in messages[0].msg


def test_an_empty_claim_name_is_an_error(settings: Settings) -> None:
    settings.QASSIST_OIDC_GROUPS_CLAIM = " "
    assert ids(check_single_sign_on()) == ["signin.E005"]
