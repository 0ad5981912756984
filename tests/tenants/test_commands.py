from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from tenants.models import ApiKey, Tenant
from tenants.services import api_key_authenticate

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    stdout = StringIO()
    call_command(*args, stdout=stdout, stderr=StringIO())
    return stdout.getvalue()


def test_it_creates_a_tenant_from_the_command_line() -> None:
    out = run(
        "create_tenant",
        "sales",
        "--name",
        "Sales",
        "--rpm",
        "10",
        "--tpm",
        "5000",
        "--concurrent",
        "3",
        "--daily-quota",
        "100000",
        "--monthly-quota",
        "2000000",
        "--system-prompt",
        "You help the sales team.",
        "--priority",
        "2",
    )
    tenant = Tenant.objects.get(slug="sales")
    assert tenant.name == "Sales"
    assert tenant.requests_per_minute == 10
    assert tenant.tokens_per_minute == 5000
    assert tenant.max_concurrent_streams == 3
    assert tenant.daily_token_quota == 100_000
    assert tenant.monthly_token_quota == 2_000_000
    assert tenant.system_prompt == "You help the sales team."
    assert tenant.priority == 2
    assert "Created tenant sales" in out


def test_it_leaves_limits_empty_when_not_given() -> None:
    run("create_tenant", "ops")
    tenant = Tenant.objects.get(slug="ops")
    assert tenant.name == "ops"
    assert tenant.requests_per_minute is None
    assert tenant.daily_token_quota is None


def test_it_refuses_an_existing_slug(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match="already exists"):
        run("create_tenant", "acme")


def test_it_refuses_a_bad_slug() -> None:
    with pytest.raises(CommandError, match="not a valid tenant slug"):
        run("create_tenant", "Not A Slug")


def test_it_prints_a_working_key_as_the_last_line(tenant: Tenant) -> None:
    out = run("create_api_key", "acme", "--name", "ci")
    lines = out.rstrip("\n").splitlines()
    assert len(lines) > 1  # an explanation comes first
    raw = lines[-1]
    key = api_key_authenticate(raw_key=raw)
    assert key is not None
    assert key.tenant == tenant
    assert key.name == "ci"
    assert key.expires_at is None


def test_it_names_a_key_made_without_a_name(tenant: Tenant) -> None:
    run("create_api_key", "acme")
    assert ApiKey.objects.get().name.startswith("manage.py create_api_key")


def test_it_sets_an_expiry_in_days(tenant: Tenant) -> None:
    run("create_api_key", "acme", "--expires-days", "30")
    key = ApiKey.objects.get()
    assert key.expires_at is not None
    expected = timezone.now() + timedelta(days=30)
    assert abs(key.expires_at - expected) < timedelta(minutes=1)


def test_it_refuses_a_key_for_an_unknown_tenant() -> None:
    with pytest.raises(CommandError, match="No tenant"):
        run("create_api_key", "nobody")
    assert not ApiKey.objects.exists()


def test_it_refuses_a_non_positive_expiry(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match="expires-days"):
        run("create_api_key", "acme", "--expires-days", "0")


def test_it_warns_on_stderr_about_an_inactive_tenant(tenant: Tenant) -> None:
    tenant.active = False
    tenant.save()
    stdout, stderr = StringIO(), StringIO()
    call_command("create_api_key", "acme", stdout=stdout, stderr=stderr)
    assert "inactive" in stderr.getvalue()
    assert stdout.getvalue().rstrip("\n").splitlines()[-1].startswith("qa_")


@pytest.fixture(scope="module")
def manage(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., CompletedProcess[str]]:
    """Runs manage.py in a real process against a database of its own."""
    var = tmp_path_factory.mktemp("cli")
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": f"sqlite:///{var / 'cli.sqlite3'}",
        "QASSIST_VAR_DIR": str(var),
        "SECRET_KEY": "test-" + "x" * 50,
    }
    command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]

    def manage(*args: str) -> CompletedProcess[str]:
        return subprocess.run(  # noqa: S603  # our own manage.py
            [*command, *args], env=env, capture_output=True, text=True, check=False
        )

    assert manage("migrate").returncode == 0
    return manage


def test_it_fails_without_a_traceback_from_a_shell(
    manage: Callable[..., CompletedProcess[str]],
) -> None:
    result = manage("create_api_key", "nobody")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "No tenant" in result.stderr
    assert result.stdout == ""


def test_its_last_line_is_the_key_for_tail_n1(
    manage: Callable[..., CompletedProcess[str]],
) -> None:
    assert manage("create_tenant", "shell").returncode == 0
    result = manage("create_api_key", "shell")
    assert result.returncode == 0
    *explanation, last = result.stdout.splitlines()
    assert explanation
    assert re.fullmatch(r"qa_[A-Za-z0-9]{8}_[A-Za-z0-9]{32,}", last)


def test_it_gives_a_key_a_document_scope_of_named_groups(tenant: Tenant) -> None:
    from knowledge.access import reader_for_api_key
    from tenants.services import tenant_group_create

    hr = tenant_group_create(tenant=tenant, name="HR")
    raw = run("create_api_key", "acme", "--groups", "HR").strip().splitlines()[-1]
    api_key = api_key_authenticate(raw_key=raw)
    assert api_key is not None
    assert reader_for_api_key(api_key=api_key).groups == frozenset({hr.pk})
    with pytest.raises(CommandError, match="no group named “Sales”"):
        run("create_api_key", "acme", "--groups", "HR,Sales")
