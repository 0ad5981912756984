from __future__ import annotations

import stat
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from tenants.models import ApiKey, Membership, Tenant

pytestmark = pytest.mark.django_db


def bootstrap() -> str:
    stdout = StringIO()
    call_command("bootstrap_demo", stdout=stdout)
    return stdout.getvalue()


def counts() -> tuple[int, int, int, int]:
    return (
        Tenant.objects.count(),
        User.objects.count(),
        Membership.objects.count(),
        ApiKey.objects.count(),
    )


def test_it_sets_up_a_demo_tenant_and_an_admin(var_dir: Path) -> None:
    out = bootstrap()
    tenant = Tenant.objects.get(slug="demo")
    assert tenant.name == "Demo"
    assert tenant.active
    assert tenant.requests_per_minute
    assert tenant.max_concurrent_streams
    admin = User.objects.get(username="admin")
    assert admin.is_superuser
    assert admin.is_staff
    membership = Membership.objects.get(user=admin, tenant=tenant)
    assert membership.role == Membership.Role.ADMIN
    password = (var_dir / "admin-password.txt").read_text().strip()
    assert len(password) >= 16
    assert admin.check_password(password)
    assert "http://127.0.0.1:8000/" in out
    assert "admin" in out
    assert password in out


def test_it_keeps_the_password_file_private(var_dir: Path) -> None:
    bootstrap()
    mode = stat.S_IMODE((var_dir / "admin-password.txt").stat().st_mode)
    assert mode == 0o600


def test_it_is_idempotent(var_dir: Path) -> None:
    bootstrap()
    password_file = var_dir / "admin-password.txt"
    password = password_file.read_text()
    before = counts()

    out = bootstrap()

    assert counts() == before
    assert password_file.read_text() == password
    assert User.objects.get(username="admin").check_password(password.strip())
    assert password.strip() in out
    assert "Created" not in out


def test_it_never_resets_a_changed_password(var_dir: Path) -> None:
    bootstrap()
    admin = User.objects.get(username="admin")
    admin.set_password("chosen by the admin")
    admin.save()

    out = bootstrap()

    admin.refresh_from_db()
    assert admin.check_password("chosen by the admin")
    assert "out of date" in out
    assert "changepassword admin" in out
    assert (var_dir / "admin-password.txt").read_text().strip() not in out


def test_it_says_so_when_the_password_file_is_gone(var_dir: Path) -> None:
    bootstrap()
    (var_dir / "admin-password.txt").unlink()

    out = bootstrap()

    assert User.objects.get(username="admin").has_usable_password()
    assert not (var_dir / "admin-password.txt").exists()
    assert "is gone" in out
    assert "changepassword admin" in out


def test_it_adopts_an_existing_admin_and_demo_tenant(var_dir: Path) -> None:
    admin = User.objects.create_user("admin", password="mine")
    Tenant.objects.create(slug="demo", name="Our demo")

    bootstrap()

    admin.refresh_from_db()
    assert admin.check_password("mine")
    assert Tenant.objects.get(slug="demo").name == "Our demo"
    assert Membership.objects.filter(user=admin, tenant__slug="demo").exists()
    assert not (var_dir / "admin-password.txt").exists()


def test_it_does_not_change_an_existing_membership_role(var_dir: Path) -> None:
    bootstrap()
    Membership.objects.update(role=Membership.Role.MEMBER)
    bootstrap()
    assert Membership.objects.get().role == Membership.Role.MEMBER
