from __future__ import annotations

from django import template

from signin import oidc, services

register = template.Library()


@register.simple_tag
def single_sign_on() -> dict[str, object]:
    """{% single_sign_on as sso %}: whether to offer "Sign in with <name>", and the name."""
    return {"enabled": oidc.enabled(), "name": services.provider_name()}
