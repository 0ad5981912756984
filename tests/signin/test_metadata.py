"""What qassist accepts of a provider's discovery document, whatever the provider says."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_django import Settings

from signin import oidc
from signin.errors import SignInError

ISSUER = "https://login.example.com"


class Discovered:
    """A client whose discovery document has already been read."""

    def __init__(self, **metadata: Any) -> None:
        self.metadata = {
            "issuer": ISSUER,
            "authorization_endpoint": f"{ISSUER}/auth",
            "token_endpoint": f"{ISSUER}/token",
            "jwks_uri": f"{ISSUER}/jwks",
            **metadata,
        }

    def load_server_metadata(self) -> dict[str, Any]:
        return self.metadata


@pytest.fixture(autouse=True)
def issuer(settings: Settings) -> None:
    settings.QASSIST_OIDC_ISSUER = ISSUER
    settings.QASSIST_OIDC_CLIENT_ID = "qassist"


def test_only_asymmetric_signatures_are_accepted() -> None:
    metadata = oidc._metadata(
        Discovered(id_token_signing_alg_values_supported=["none", "HS256", "RS256", "ES256"])
    )
    assert metadata["id_token_signing_alg_values_supported"] == ["RS256", "ES256"]


def test_a_provider_signing_only_with_the_client_secret_is_refused() -> None:
    with pytest.raises(SignInError) as raised:
        oidc._metadata(Discovered(id_token_signing_alg_values_supported=["HS256", "none"]))
    assert raised.value.kind == "misconfigured"


def test_without_a_list_rs256_is_assumed() -> None:
    assert oidc._metadata(Discovered())["id_token_signing_alg_values_supported"] == ["RS256"]


def test_a_document_of_another_issuer_is_refused() -> None:
    with pytest.raises(SignInError) as raised:
        oidc._metadata(Discovered(issuer="https://evil.example"))
    assert raised.value.kind == "misconfigured"
    assert "https://evil.example" in raised.value.detail


def test_a_document_without_a_token_endpoint_is_refused() -> None:
    with pytest.raises(SignInError) as raised:
        oidc._metadata(Discovered(token_endpoint=""))
    assert "token_endpoint" in raised.value.detail
