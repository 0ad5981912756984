"""A logout forgets the session's refresh token at once (it would never be used again)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest

from signin.models import ProviderSession


@receiver(user_logged_out)
def forget_provider_session(sender: Any, request: HttpRequest | None, **kwargs: Any) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        ProviderSession.objects.filter(session_key=session_key).delete()
