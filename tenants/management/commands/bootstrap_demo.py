"""`manage.py bootstrap_demo`: what `make run` needs on a fresh machine, safe to run every time.

Creates (once) a tenant `demo`, a superuser `admin` whose random password is written to
VAR_DIR/admin-password.txt (mode 0600), and admin's membership of demo as tenant admin.
Never changes an existing password; every run says how to log in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils.crypto import get_random_string

from tenants.models import Membership, Tenant
from tenants.services import tenant_create

DEMO_SLUG = "demo"
ADMIN_USERNAME = "admin"


def site_url() -> str:
    """Where `make run` serves qassist (it exports HOST and PORT)."""
    host = os.environ.get("HOST") or "127.0.0.1"
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{os.environ.get('PORT') or 8000}/"  # noqa: S104


def password_file() -> Path:
    return Path(settings.VAR_DIR) / "admin-password.txt"


def write_secret(path: Path, text: str) -> None:
    """Write `text` readable by the owner only, even if the file was there with wider modes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


class Command(BaseCommand):
    help = "Create the demo tenant and an admin user if missing, then print how to log in."

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            tenant = self.ensure_tenant()
            admin = self.ensure_admin()
            self.ensure_membership(admin, tenant)
        self.print_login(admin)

    def ensure_tenant(self) -> Tenant:
        tenant = Tenant.objects.filter(slug=DEMO_SLUG).first()
        if tenant is not None:
            return tenant
        # Small on purpose: one 2-core machine serves about 100-200 tokens/s in total.
        tenant = tenant_create(
            slug=DEMO_SLUG,
            name="Demo",
            requests_per_minute=30,
            tokens_per_minute=20_000,
            max_concurrent_streams=4,
            daily_token_quota=500_000,
            monthly_token_quota=5_000_000,
        )
        self.stdout.write(f"Created tenant {tenant.slug}.")
        return tenant

    def ensure_admin(self) -> User:
        admin = User.objects.filter(username=ADMIN_USERNAME).first()
        if admin is not None:
            return admin
        password = get_random_string(20)
        admin = User.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
        # Inside the transaction: if the file cannot be written, no user with a lost password.
        write_secret(password_file(), password)
        self.stdout.write(
            f"Created superuser {ADMIN_USERNAME}; password saved in {password_file()}."
        )
        return admin

    def ensure_membership(self, admin: User, tenant: Tenant) -> None:
        _, created = Membership.objects.get_or_create(
            user=admin, tenant=tenant, defaults={"role": Membership.Role.ADMIN}
        )
        if created:
            self.stdout.write(f"Made {admin.username} a tenant admin of {tenant.slug}.")

    def print_login(self, admin: User) -> None:
        path = password_file()
        try:
            password: str | None = path.read_text().strip()
        except FileNotFoundError:
            password = None
        self.stdout.write("")
        self.stdout.write(f"Open {site_url()} and log in as {admin.username}")
        if password is not None and admin.check_password(password):
            self.stdout.write(f"  password: {password}  (from {path})")
        elif password is not None:
            self.stdout.write(
                f"  {path} is out of date: the password was changed since. "
                f"To set a new one: python manage.py changepassword {admin.username}"
            )
        else:
            self.stdout.write(
                f"  {path} is gone: the password was changed or the file removed. "
                f"To set a new one: python manage.py changepassword {admin.username}"
            )
        self.stdout.write(f"Admin (tenants, keys, limits, usage): {site_url()}admin/")
        self.stdout.write(f"API key for scripts: python manage.py create_api_key {DEMO_SLUG}")
