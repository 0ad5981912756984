"""Single sign-on's configuration problems, as system checks with stable ids.

signin.E001 QASSIST_OIDC_ISSUER is not an https URL (http only on the machine itself)
signin.E002 the issuer and the client id are not set together
signin.E003 QASSIST_OIDC_SCOPES lacks openid
signin.E004 a duration (re-check, outage grace, timeout) is malformed
signin.E005 a claim name (groups, username) is empty
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

LOOPBACK_NAMES = ("localhost",)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shown(name: str, value: object) -> str:
    raw = os.environ.get(name)
    # env_int and env_float keep a malformed value as -1: show what was written.
    if value in (-1, -1.0) and raw is not None:
        return repr(raw)
    return repr(value)


@register("signin")
def check_single_sign_on(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    issuer = settings.QASSIST_OIDC_ISSUER
    client_id = settings.QASSIST_OIDC_CLIENT_ID
    if issuer:
        parts = urlsplit(issuer)
        secure = parts.scheme == "https" or (
            parts.scheme == "http" and _is_loopback(parts.hostname or "")
        )
        if not parts.hostname or not secure or parts.query or parts.fragment:
            errors.append(
                Error(
                    f"QASSIST_OIDC_ISSUER={issuer!r} is not an https URL without query or "
                    "fragment.",
                    hint="The provider's issuer as its discovery document states it, e.g. "
                    "https://login.example.com/realms/staff (plain http only on 127.0.0.1).",
                    id="signin.E001",
                )
            )
    if bool(issuer) != bool(client_id):
        missing = "QASSIST_OIDC_CLIENT_ID" if issuer else "QASSIST_OIDC_ISSUER"
        errors.append(
            Error(
                f"Single sign-on is half configured: {missing} is not set.",
                hint="Set both QASSIST_OIDC_ISSUER and QASSIST_OIDC_CLIENT_ID (and the client "
                "secret the provider gave), or neither for local passwords only.",
                id="signin.E002",
            )
        )
    if issuer and "openid" not in settings.QASSIST_OIDC_SCOPES.split():
        errors.append(
            Error(
                f"QASSIST_OIDC_SCOPES={settings.QASSIST_OIDC_SCOPES!r} lacks openid.",
                hint="Without it the provider sends no ID token; the default is "
                "'openid profile email'.",
                id="signin.E003",
            )
        )
    for name, positive in (
        ("QASSIST_OIDC_RECHECK_SECONDS", True),
        ("QASSIST_OIDC_OUTAGE_GRACE_SECONDS", False),
        ("QASSIST_OIDC_TIMEOUT_SECONDS", True),
    ):
        value = getattr(settings, name)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (value > 0 if positive else value >= 0)
        ):
            continue
        errors.append(
            Error(
                f"{name}={_shown(name, value)} is not a number "
                f"{'above 0' if positive else 'of 0 or more'}.",
                hint="Seconds; unset it for the default (docs/deploy.md, Single sign-on).",
                id="signin.E004",
            )
        )
    for name in ("QASSIST_OIDC_GROUPS_CLAIM", "QASSIST_OIDC_USERNAME_CLAIM"):
        if not str(getattr(settings, name)).strip():
            errors.append(
                Error(f"{name} is empty.", hint="Unset it for the default.", id="signin.E005")
            )
    return errors
