"""`manage.py create_api_key SLUG`: prints the new key alone on the last line of stdout.

Scripts rely on that: key=$(python manage.py create_api_key demo | tail -n1)
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tenants.models import ApiKey, Tenant, TenantGroup
from tenants.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it (last line of the output)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", help="the tenant's slug")
        parser.add_argument("--name", help="what the key is for (default: created from the CLI)")
        parser.add_argument("--expires-days", type=int, help="expire after N days (default: never)")
        parser.add_argument(
            "--groups",
            help="the key reads only documents open to everyone and those of these tenant "
            "groups (comma-separated names; empty: none). Default: every document",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["slug"]
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(
                f"No tenant with the slug “{slug}”. Create it with: "
                f"python manage.py create_tenant {slug}"
            )
        expires_days: int | None = options["expires_days"]
        if expires_days is not None and expires_days <= 0:
            raise CommandError("--expires-days must be a positive number of days.")
        now = timezone.now()
        expires_at = now + timedelta(days=expires_days) if expires_days else None
        name = options["name"] or f"manage.py create_api_key, {now:%Y-%m-%d}"
        scope, groups = ApiKey.Scope.ALL, []
        if options["groups"] is not None:
            wanted = [g.strip() for g in str(options["groups"]).split(",") if g.strip()]
            found = {g.name: g for g in TenantGroup.objects.filter(tenant=tenant, name__in=wanted)}
            missing = [g for g in wanted if g not in found]
            if missing:
                raise CommandError(f"{tenant.slug} has no group named “{missing[0]}”.")
            scope, groups = ApiKey.Scope.GROUPS, [found[g] for g in wanted]
        api_key, raw_key = api_key_create(
            tenant=tenant, name=name, expires_at=expires_at, document_scope=scope, groups=groups
        )
        if not tenant.active:
            self.stderr.write(
                f"Warning: tenant {tenant.slug} is inactive; its keys are refused until "
                "it is activated again."
            )
        expiry = (
            f"expires {timezone.localtime(expires_at):%Y-%m-%d %H:%M %Z}"
            if expires_at
            else "never expires"
        )
        self.stdout.write(
            f"Created API key {api_key.prefix} “{api_key.name}” for tenant {tenant.slug}; "
            f"it {expiry}."
        )
        self.stdout.write("Copy it now: it is shown only once. Send it as")
        self.stdout.write("  Authorization: Bearer <key>")
        self.stdout.write(raw_key)
