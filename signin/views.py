"""Sign in with the identity provider: /accounts/oidc/start/ sends the browser there, and
/accounts/oidc/callback/ is where it comes back. Thin: signin.oidc and signin.services do the
work; each way it can fail ends on one page that says what to do (signin/errors.py)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from signin import oidc, services
from signin.errors import ERROR_PAGES, SignInError

logger = logging.getLogger(__name__)

_NEXT_KEY = "signin_next"


def _require_enabled() -> None:
    if not oidc.enabled():
        raise Http404("Single sign-on is not configured.")


def _callback_uri(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("signin:callback"))


@require_GET
@never_cache
def start(request: HttpRequest) -> HttpResponse:
    _require_enabled()
    request.session[_NEXT_KEY] = services.check_next(
        url=request.GET.get("next"), host=request.get_host(), secure=request.is_secure()
    )
    try:
        url = oidc.authorization_url(session=request.session, redirect_uri=_callback_uri(request))
    except SignInError as error:
        return error_page(request, error)
    return HttpResponseRedirect(url)


@require_GET
@never_cache
def callback(request: HttpRequest) -> HttpResponse:
    _require_enabled()
    try:
        answer = oidc.finish_authorization(request=request)
        user = services.identity_sign_in(issuer=str(answer.claims["iss"]), claims=answer.claims)
    except SignInError as error:
        return error_page(request, error)
    next_url = request.session.pop(_NEXT_KEY, None) or reverse(settings.LOGIN_REDIRECT_URL)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[services.SESSION_FLAG] = True
    request.session.save()
    assert request.session.session_key is not None
    services.provider_session_start(
        session_key=request.session.session_key, user=user, refresh_token=answer.refresh_token
    )
    logger.info("single sign-on: %s signed in", user.username)
    return HttpResponseRedirect(next_url)


def error_page(request: HttpRequest, error: SignInError) -> HttpResponse:
    page = ERROR_PAGES[error.kind]
    logger.warning("single sign-on failed (%s): %s", error.kind, error.detail or "-")
    name = services.provider_name()
    context = {
        "kind": error.kind,
        "title": page.title.format(provider=name),
        "text": page.text.format(provider=name),
        "next_step": page.next_step.format(provider=name),
        "retry": page.retry,
        "provider_name": name,
    }
    return render(request, "signin/error.html", context, status=page.status)
