"""Single sign-on for the live server of tests/browser/test_single_sign_on.py: Acme's members
come from the identity provider's group "sales", its admins from "it-admins". Run after
tests.browser.seed, in the live server's environment."""

from __future__ import annotations

import os

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()

    from signin.models import GroupMapping
    from tenants.models import Membership, Tenant

    acme = Tenant.objects.get(slug="acme")
    GroupMapping.objects.create(tenant=acme, group="sales", role=Membership.Role.MEMBER)
    GroupMapping.objects.create(tenant=acme, group="it-admins", role=Membership.Role.ADMIN)


if __name__ == "__main__":
    main()
