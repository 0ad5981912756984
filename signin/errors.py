"""What can go wrong when someone signs in through the identity provider, and the page each
case gets: what happened, in words a person can act on, and who can fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorKind = Literal[
    "unreachable",  # the provider did not answer, or answered with a server error
    "misconfigured",  # its discovery document does not fit what qassist was told
    "client_rejected",  # the provider refused qassist's client id or secret
    "denied",  # the person declined, or the provider would not let them in
    "provider_error",  # any other error the provider sent back
    "expired",  # the sign-in's state is gone: the link was used already, or is too old
    "invalid_token",  # the ID token fails validation: signature, issuer, audience, nonce, time
    "refused",  # the provider would not renew a session (refresh token refused)
    "account_disabled",  # staff switched the qassist account off
]


class SignInError(Exception):
    """A sign-in (or a session's re-check) that cannot go on. `detail` is for the log only."""

    def __init__(self, kind: ErrorKind, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind: ErrorKind = kind
        self.detail = detail


@dataclass(frozen=True)
class ErrorPage:
    title: str
    text: str
    next_step: str
    status: int
    retry: bool = True  # offer "Try again" (a new sign-in)


ERROR_PAGES: dict[ErrorKind, ErrorPage] = {
    "unreachable": ErrorPage(
        "The sign-in service is not answering",
        "{provider} did not answer qassist, or answered with an error of its own. Nothing is "
        "wrong with your account.",
        "Try again in a few minutes. If it goes on, tell your IT department that qassist cannot "
        "reach the identity provider.",
        503,
    ),
    "misconfigured": ErrorPage(
        "Single sign-on is not set up correctly",
        "The identity provider's settings do not match what qassist was configured with (its "
        "issuer or signing keys). Nothing is wrong with your account.",
        "Tell your qassist administrator: the server log says what does not match.",
        502,
        retry=False,
    ),
    "client_rejected": ErrorPage(
        "{provider} does not accept qassist",
        "The identity provider refused qassist's client credentials, so it could not finish "
        "signing you in. Nothing is wrong with your account.",
        "Tell your qassist administrator: the client id or client secret "
        "(QASSIST_OIDC_CLIENT_ID, QASSIST_OIDC_CLIENT_SECRET) is wrong or has expired.",
        502,
        retry=False,
    ),
    "denied": ErrorPage(
        "You did not sign in",
        "{provider} did not let qassist sign you in: access was declined, or your account may "
        "not use qassist.",
        "To use qassist, sign in again and allow access. If you did and still see this, ask "
        "your IT department to give your account access to qassist.",
        403,
    ),
    "provider_error": ErrorPage(
        "{provider} could not sign you in",
        "The identity provider stopped the sign-in with an error.",
        "Try again. If it goes on, tell your IT department; the server log has the "
        "provider's message.",
        502,
    ),
    "expired": ErrorPage(
        "This sign-in link has expired",
        "The page you came back from was already used, or was left open too long. For your "
        "safety each sign-in can be completed only once.",
        "Start a new sign-in.",
        400,
    ),
    "invalid_token": ErrorPage(
        "The sign-in could not be verified",
        "The identity provider's answer did not pass qassist's checks (its signature, who it "
        "was issued by or for, or which sign-in it belongs to), so you were not signed in.",
        "Start a new sign-in. If it happens again, tell your IT department; the server log "
        "says which check failed.",
        400,
    ),
    "refused": ErrorPage(
        "Your sign-in has ended",
        "{provider} no longer confirms your account, so your qassist session ended.",
        "Sign in again. If that fails, ask your IT department about your account.",
        403,
    ),
    "account_disabled": ErrorPage(
        "Your qassist account is switched off",
        "You signed in with {provider}, but a qassist administrator has switched your account off.",
        "Ask your qassist administrator to switch it back on.",
        403,
        retry=False,
    ),
}
