"""The one module that speaks OpenID Connect to the identity provider, through Authlib.

Authorization code with PKCE (S256) and a nonce; the provider's discovery document, checked
against the configured issuer; ID tokens validated by Authlib (signature against the
provider's JWKS, issuer, audience and authorized party, expiry, nonce, at_hash; the issuer and
audience spelt out, see _claims_options), with only asymmetric algorithms accepted.
Everything that goes wrong comes out as a SignInError of a kind a person can act on
(signin/errors.py); the detail goes to the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import requests
from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest
from joserfc.errors import JoseError

from signin.errors import SignInError

logger = logging.getLogger(__name__)

# Asymmetric signatures only: "none" and the HMAC family (keyed with the client secret, which
# more parties know than the provider's private key) are never accepted.
ACCEPTED_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
    "Ed25519",
)  # fmt: skip
# What the provider sends back to the callback when the person (or its policy) said no.
DENIAL_ERRORS = frozenset(
    {"access_denied", "consent_required", "login_required", "interaction_required"}
)
CLIENT_ERRORS = frozenset({"invalid_client", "unauthorized_client"})
_NAME = "idp"


@dataclass(frozen=True)
class ProviderConfig:
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    timeout: float

    @classmethod
    def from_settings(cls) -> ProviderConfig:
        return cls(
            issuer=settings.QASSIST_OIDC_ISSUER,
            client_id=settings.QASSIST_OIDC_CLIENT_ID,
            client_secret=settings.QASSIST_OIDC_CLIENT_SECRET,
            scopes=settings.QASSIST_OIDC_SCOPES,
            timeout=settings.QASSIST_OIDC_TIMEOUT_SECONDS,
        )


@dataclass(frozen=True)
class ProviderAnswer:
    """What the provider vouched for: the person's claims (ID token, completed by the
    userinfo endpoint when the groups are not in it) and the refresh token, if it gave one."""

    claims: dict[str, Any]
    refresh_token: str | None


def enabled() -> bool:
    return bool(settings.QASSIST_OIDC_ISSUER and settings.QASSIST_OIDC_CLIENT_ID)


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


_clients: dict[ProviderConfig, Any] = {}


def _client() -> Any:
    """Authlib's client for the configured provider, one per configuration (its discovery
    document and keys are cached on it)."""
    config = ProviderConfig.from_settings()
    client = _clients.get(config)
    if client is None:
        kwargs: dict[str, Any] = {
            "scope": config.scopes,
            "code_challenge_method": "S256",
            "default_timeout": config.timeout,
        }
        if not config.client_secret:  # a public client: PKCE alone
            kwargs["token_endpoint_auth_method"] = "none"  # noqa: S105  (a method's name)
        oauth = OAuth()
        oauth.register(
            name=_NAME,
            client_id=config.client_id,
            client_secret=config.client_secret or None,
            server_metadata_url=discovery_url(config.issuer),
            client_kwargs=kwargs,
        )
        client = oauth.create_client(_NAME)
        _clients.clear()  # settings changed (tests): drop the old provider's client
        _clients[config] = client
    return client


def reset() -> None:
    """Forget the discovery document and keys (tests; a provider that rotated everything)."""
    _clients.clear()


def _metadata(client: Any) -> dict[str, Any]:
    try:
        metadata: dict[str, Any] = client.load_server_metadata()
    except (requests.RequestException, ValueError) as exc:
        raise SignInError("unreachable", f"discovery document: {exc}") from exc
    issuer = settings.QASSIST_OIDC_ISSUER
    if str(metadata.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        reset()
        raise SignInError(
            "misconfigured",
            f"the discovery document's issuer is {metadata.get('issuer')!r}, "
            f"QASSIST_OIDC_ISSUER is {issuer!r}",
        )
    for endpoint in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not metadata.get(endpoint):
            reset()
            raise SignInError("misconfigured", f"the discovery document has no {endpoint}")
    advertised = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
    accepted = [alg for alg in advertised if alg in ACCEPTED_ALGORITHMS]
    if not accepted:
        reset()
        raise SignInError(
            "misconfigured", f"no asymmetric ID token signing algorithm among {advertised}"
        )
    # Authlib verifies ID tokens with the algorithms listed here.
    metadata["id_token_signing_alg_values_supported"] = accepted
    return metadata


def _claims_options(metadata: dict[str, Any]) -> dict[str, Any]:
    """What an ID token must say: issued by this provider, for this client. Authlib checks the
    issuer by default but the audience only through `azp` (a token for another client that
    names this one as authorized party would pass), so both are spelt out."""
    return {
        "iss": {"essential": True, "values": [metadata["issuer"]]},
        "aud": {"essential": True, "values": [settings.QASSIST_OIDC_CLIENT_ID]},
    }


def authorization_url(*, session: SessionBase, redirect_uri: str) -> str:
    """Where to send the browser to sign in; the state, nonce and PKCE verifier are kept in
    `session` until the callback (once: a second callback with the same state is refused).
    The discovery document is read afresh: a provider that is down gets its page here, before
    the browser is sent to it, and rotated keys are picked up."""
    reset()
    client = _client()
    _metadata(client)
    try:
        answer = client.create_authorization_url(redirect_uri)
    except (requests.RequestException, ValueError) as exc:
        raise SignInError("unreachable", str(exc)) from exc
    client.save_authorize_data(_SessionRequest(session), redirect_uri=redirect_uri, **answer)
    return str(answer["url"])


class _SessionRequest:
    """Authlib's Django helpers want a request; they only use its session."""

    def __init__(self, session: SessionBase) -> None:
        self.session = session


def finish_authorization(*, request: HttpRequest) -> ProviderAnswer:
    """The callback: the state is checked and used up, the code exchanged (with the PKCE
    verifier), the ID token validated against the nonce of this sign-in."""
    client = _client()
    metadata = _metadata(client)
    if not request.GET.get("error") and not request.GET.get("state"):
        raise SignInError("expired", "a callback without state")
    try:
        token = client.authorize_access_token(request, claims_options=_claims_options(metadata))
    except MismatchingStateError as exc:
        raise SignInError("expired", "no sign-in in this session has that state") from exc
    except OAuthError as exc:
        raise _callback_error(exc) from exc
    except JoseError as exc:
        raise SignInError("invalid_token", f"{type(exc).__name__}: {exc}") from exc
    except (requests.RequestException, ValueError) as exc:
        raise SignInError("unreachable", f"token endpoint: {exc}") from exc
    if not token.get("userinfo"):
        raise SignInError("invalid_token", "the token response has no ID token")
    claims = dict(token["userinfo"])
    return ProviderAnswer(
        claims=_with_userinfo(client, token, claims), refresh_token=token.get("refresh_token")
    )


def _callback_error(exc: OAuthError) -> SignInError:
    error = str(getattr(exc, "error", "") or "")
    detail = f"{error}: {getattr(exc, 'description', '') or ''}"
    if error in DENIAL_ERRORS:
        return SignInError("denied", detail)
    if error in CLIENT_ERRORS:
        return SignInError("client_rejected", detail)
    if error == "invalid_grant":  # a code used twice, or too old
        return SignInError("expired", detail)
    return SignInError("provider_error", detail)


def refresh(*, refresh_token: str, subject: str) -> ProviderAnswer:
    """A session's re-check: the provider renews the tokens only for a person it still
    vouches for. A new ID token must be about the same subject (OpenID Connect Core 12.2)."""
    client = _client()
    metadata = _metadata(client)
    try:
        token = client.fetch_access_token(grant_type="refresh_token", refresh_token=refresh_token)
    except OAuthError as exc:
        error = str(getattr(exc, "error", "") or "")
        detail = f"{error}: {getattr(exc, 'description', '') or ''}"
        if error == "invalid_grant":
            raise SignInError("refused", detail) from exc
        if error in CLIENT_ERRORS:
            raise SignInError("client_rejected", detail) from exc
        raise SignInError("provider_error", detail) from exc
    except (requests.RequestException, ValueError) as exc:
        raise SignInError("unreachable", f"token endpoint: {exc}") from exc
    claims: dict[str, Any] = {"sub": subject}
    if token.get("id_token"):
        try:
            claims = dict(
                client.parse_id_token(token, nonce=None, claims_options=_claims_options(metadata))
            )
        except JoseError as exc:
            raise SignInError("invalid_token", f"{type(exc).__name__}: {exc}") from exc
        if claims.get("sub") != subject:
            raise SignInError("invalid_token", f"a renewed ID token is about {claims.get('sub')!r}")
    claims = _with_userinfo(client, token, claims)
    return ProviderAnswer(claims=claims, refresh_token=token.get("refresh_token") or refresh_token)


def _with_userinfo(client: Any, token: dict[str, Any], claims: dict[str, Any]) -> dict[str, Any]:
    """Providers that keep the groups (or everything but `sub`) out of the ID token give them
    at the userinfo endpoint; its `sub` must be the ID token's."""
    groups_claim = settings.QASSIST_OIDC_GROUPS_CLAIM
    metadata = client.load_server_metadata()
    if groups_claim in claims or not metadata.get("userinfo_endpoint"):
        return claims
    try:
        info = dict(client.userinfo(token=token))
    except (requests.RequestException, ValueError, OAuthError) as exc:
        raise SignInError("unreachable", f"userinfo endpoint: {exc}") from exc
    if info.get("sub") != claims.get("sub"):
        raise SignInError("invalid_token", "the userinfo endpoint answered about someone else")
    return {**info, **claims}
