"""`manage.py create_tenant SLUG`: a tenant with its limits, from a script or a terminal."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.services import tenant_create


def validation_message(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return " ".join(
            f"{field}: {message}" if field != "__all__" else message
            for field, messages in error.message_dict.items()
            for message in messages
        )
    return " ".join(error.messages)


class Command(BaseCommand):
    help = "Create a tenant. Limits not given mean no limit."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", help="lowercase letters, digits and hyphens, e.g. sales-emea")
        parser.add_argument("--name", help="display name (default: the slug)")
        parser.add_argument("--rpm", type=int, help="requests per minute")
        parser.add_argument("--tpm", type=int, help="tokens (prompt + completion) per minute")
        parser.add_argument("--concurrent", type=int, help="streams generating at once")
        parser.add_argument("--daily-quota", type=int, help="tokens per day")
        parser.add_argument("--monthly-quota", type=int, help="tokens per calendar month")
        parser.add_argument("--system-prompt", default="", help="prepended to every conversation")
        parser.add_argument("--priority", type=int, default=0, help="higher runs first")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = tenant_create(
                slug=options["slug"],
                name=options["name"],
                priority=options["priority"],
                requests_per_minute=options["rpm"],
                tokens_per_minute=options["tpm"],
                max_concurrent_streams=options["concurrent"],
                daily_token_quota=options["daily_quota"],
                monthly_token_quota=options["monthly_quota"],
                system_prompt=options["system_prompt"],
            )
        except ValidationError as error:
            raise CommandError(validation_message(error)) from None
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}).")
        self.stdout.write(f"Next: python manage.py create_api_key {tenant.slug}")
