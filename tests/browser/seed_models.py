"""Two models for the live server of tests/browser/test_models.py (issue #36): Acme's members
may pick the second model of QASSIST_MODELS beside the default. Run after tests.browser.seed,
in the live server's environment."""

from __future__ import annotations

import os

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()

    from django.conf import settings

    from tenants.models import Tenant

    Tenant.objects.filter(slug="acme").update(allowed_models=settings.QASSIST_MODELS[1:])


if __name__ == "__main__":
    main()
