"""Sessions that came from the identity provider are re-checked with it once they are due
(QASSIST_OIDC_RECHECK_SECONDS): renewed, their memberships following the groups the provider
sends now, or ended. The chat websocket does the same at its own re-checks."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse

from qassist.middleware import DATABASE_ERRORS
from signin import services


class ProviderSessionMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            outcome = self._recheck(request)
        except DATABASE_ERRORS:  # the view meets it too, and answers 503 with a clear page
            outcome = "fresh"
        if outcome == "ended":
            logout(request)  # the view answers as to anyone signed out (login, 401)
            messages.info(
                request,
                f"Your session ended: {services.provider_name()} must confirm your "
                "account again. Sign in again.",
            )
        return self.get_response(request)

    @staticmethod
    def _recheck(request: HttpRequest) -> services.RecheckOutcome:
        if request.session.get(services.SESSION_FLAG) and request.user.is_authenticated:
            return services.provider_session_recheck(session_key=request.session.session_key)
        return "fresh"
