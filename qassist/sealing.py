"""Secrets kept in the database encrypted under SECRET_KEY: single sign-on's refresh tokens,
a synced source's password. Each use derives a key of its own from SECRET_KEY and a purpose,
so a database dump alone holds nothing usable, and one kind of secret never decrypts as
another. A SECRET_KEY changed since (without the old one in SECRET_KEY_FALLBACKS) makes
`unseal` return None: the secret has to be given again."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


def _fernet(purpose: str) -> MultiFernet:
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet(
        [
            Fernet(base64.urlsafe_b64encode(hashlib.sha256(f"{purpose}:{key}".encode()).digest()))
            for key in keys
        ]
    )


def seal(secret: str | None, *, purpose: str) -> str:
    """`secret` encrypted for `purpose`; "" for none."""
    return _fernet(purpose).encrypt(secret.encode()).decode() if secret else ""


def unseal(sealed: str, *, purpose: str) -> str | None:
    """The secret `seal` made for `purpose`; None for none, or when it cannot be read."""
    if not sealed:
        return None
    try:
        return _fernet(purpose).decrypt(sealed.encode()).decode()
    except InvalidToken:
        return None
