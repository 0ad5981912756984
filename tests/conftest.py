"""Personas shared by every test: two tenants, their people and a key.

acme: `owner` (tenant admin), `member`; other_tenant (globex): `outsider`.
Every persona's password is PASSWORD, for tests that log in through a form.

And the run itself: its database (DATABASE_URL's PostgreSQL only with pgvector, tests/needs.py),
the embedded model for the tests that run it, and each test's time limit.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from inference.service import set_prompt_counter
from tenants.limits import Limiter, set_limiter
from tenants.models import ApiKey, Membership, Tenant
from tenants.services import api_key_create, tenant_create
from tests import needs
from tests.fakes import FakeCounter

PASSWORD = "correct horse battery staple"
# Seconds a test marked `model` or `browser` may take, its fixtures' setup included (a live
# server, a model loaded); pyproject.toml's `timeout` is every other test's.
SLOW_TEST_TIMEOUT = 1200
TIMEOUT_BACKSTOP_GRACE = 30
_STDERR = pytest.StashKey[int]()  # the terminal's stderr, outside pytest's capture

# Tests put their own engine behind the consumer: importing qassist.asgi must not load a model.
os.environ.setdefault("QASSIST_PRELOAD_ENGINE", "0")


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # Connections opened on asgiref's worker threads (database_sync_to_async) are closed after
    # each use, so none outlives the test run and blocks dropping the PostgreSQL test database.
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    _postgresql_only_with_pgvector()
    # Taken now, while pytest's capture is suspended: the watchdog writes to the terminal.
    config.stash[_STDERR] = os.dup(sys.stderr.fileno())
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        # A file, not the shared in-memory database: requests served on other threads (the
        # ASGI app under test, the engine's) lock rows as in production, not whole tables.
        name = Path(tempfile.gettempdir()) / f"qassist-test-{os.getpid()}.sqlite3"
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = str(name)


def _postgresql_only_with_pgvector() -> None:
    """DATABASE_URL's PostgreSQL is used only when it answers and has pgvector (knowledge's
    migrations create the extension): otherwise every test needing the database would fail
    on the way in. The run then uses SQLite, and says so at its start and end; in CI
    (QASSIST_REQUIRE_SERVICES=1) it stops at once instead."""
    from django.conf import settings
    from django.db import connections

    params = needs.postgres_params_of_settings()
    if params is None:
        return
    problem = needs.postgres_problem(**params)
    if problem is None:
        return
    if needs.services_required():
        raise pytest.UsageError(f"DATABASE_URL: {problem} (QASSIST_REQUIRE_SERVICES=1)")
    needs.postgres_passed_over = problem
    # In place: django.db.connections already holds this very dict. The options are those
    # qassist/settings.py gives SQLite.
    db = settings.DATABASES["default"]
    db["ENGINE"] = "django.db.backends.sqlite3"
    db["NAME"] = str(settings.VAR_DIR / "qassist.sqlite3")  # never opened: TEST.NAME is
    db["USER"] = db["PASSWORD"] = db["HOST"] = db["PORT"] = ""
    db["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    # A PostgreSQL connection object made already (unconnected) goes: the next is SQLite's.
    with contextlib.suppress(AttributeError):
        del connections["default"]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STDERR in config.stash:
        os.close(config.stash[_STDERR])


def pytest_report_header(config: pytest.Config) -> list[str]:
    if needs.postgres_passed_over:
        return [f"database: SQLite, not DATABASE_URL: {needs.postgres_passed_over}"]
    return []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if needs.postgres_passed_over:
        terminalreporter.write_sep("=", "ran on SQLite, not on DATABASE_URL", yellow=True)
        terminalreporter.write_line(needs.postgres_passed_over)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Real-model and browser tests get a longer limit than pyproject's default timeout, which
    # the rest fit in; a timeout marker on a test itself still wins.
    for item in items:
        slow = item.get_closest_marker("model") or item.get_closest_marker("browser")
        if slow and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT))


def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    # pytest-timeout's SIGALRM fails a test that Python code keeps waiting, but its handler
    # cannot run while C code holds the interpreter. faulthandler's watchdog is a C thread:
    # TIMEOUT_BACKSTOP_GRACE seconds later it prints every thread's stack (the test's own
    # frame names it) and ends the run. Returning None lets pytest-timeout set its own timer.
    faulthandler.dump_traceback_later(
        settings.timeout + TIMEOUT_BACKSTOP_GRACE, exit=True, file=item.config.stash[_STDERR]
    )


def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded model's file. A test that asks for it is skipped without it, saying why
    (`make test` fetches it first), or failed in CI."""
    return needs.embedded_model()


@pytest.fixture(autouse=True)
def own_kv_cache_folder(settings: Settings, tmp_path: Path) -> None:
    # An engine built from settings writes kept conversations to disk when it stops; one test's
    # (or an earlier run's) must never come back warm in another.
    settings.QASSIST_HOST_CACHE_DIR = str(tmp_path / "kvcache")


@pytest.fixture(autouse=True)
def no_generated_titles(settings: Settings) -> None:
    # A title request after each new conversation's reply would interleave with what most
    # tests expect to receive; the tests of that feature turn it back on.
    settings.QASSIST_GENERATE_TITLES = False


@pytest.fixture(autouse=True)
def fresh_limits() -> Iterator[Limiter]:
    """Each test counts its requests against limits of its own (an in-process Redis)."""
    limiter = Limiter(fakeredis.FakeRedis(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    set_limiter(limiter)
    yield limiter
    set_limiter(None)


@pytest.fixture(autouse=True)
def fake_prompt_counter() -> Iterator[FakeCounter]:
    """Prompts are counted as the fake runner tokenizes them; the real-model tests put the
    model's own tokenizer back."""
    counter = FakeCounter()
    set_prompt_counter(counter)
    yield counter
    set_prompt_counter(None)


@pytest.fixture(autouse=True)
def batch_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Batches are not started behind a test's back (a runner thread would outlive it): the
    ids a test's code dispatched are listed here; tests run batches with batch_run."""
    from chat import batches

    dispatched: list[object] = []
    monkeypatch.setattr(batches, "batch_dispatch", lambda *, batch_id: dispatched.append(batch_id))
    return dispatched


@pytest.fixture(autouse=True)
def document_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, int]]:
    """Uploads are not sent to a Celery broker: the (document, version) pairs a test's code
    queued for indexing are listed here; tests index with knowledge.ingest.document_index."""
    queued: list[tuple[object, int]] = []
    monkeypatch.setattr(
        "knowledge.tasks.index_dispatch",
        lambda *, document_id, version: queued.append((document_id, version)),
    )
    return queued


@pytest.fixture(autouse=True)
def import_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Background imports are not sent to a Celery broker behind a test's back: the ids a
    test's code sent are listed here; tests run imports with cached_reply_import_run."""
    from chat import cached_reply_csv

    sent: list[object] = []
    monkeypatch.setattr(cached_reply_csv, "_send_import", sent.append)
    return sent


@pytest.fixture(autouse=True)
def fresh_cached_reply_index() -> None:
    # Each process keeps cached replies in memory; a test's rows are rolled back without the
    # signals that would tell the index, so every test starts with an index of its own.
    from chat.cache import reset_index

    reset_index()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Settings) -> None:
    # The real hasher takes ~0.3 s per user on purpose; tests make many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def var_dir(settings: Settings, tmp_path: Path) -> Path:
    """settings.VAR_DIR pointed at an empty temporary folder."""
    path = tmp_path / "var"
    path.mkdir()
    settings.VAR_DIR = path
    return path


@pytest.fixture
def tenant(db: None) -> Tenant:
    return tenant_create(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return tenant_create(slug="globex", name="Globex")


def _person(username: str, tenant: Tenant, role: str) -> User:
    user = User.objects.create_user(username, f"{username}@example.com", PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def owner(tenant: Tenant) -> User:
    return _person("owner", tenant, Membership.Role.ADMIN)


@pytest.fixture
def member(tenant: Tenant) -> User:
    return _person("member", tenant, Membership.Role.MEMBER)


@pytest.fixture
def outsider(other_tenant: Tenant) -> User:
    return _person("outsider", other_tenant, Membership.Role.MEMBER)


@pytest.fixture
def api_key(tenant: Tenant, owner: User) -> tuple[ApiKey, str]:
    """acme's key and its raw secret (what a client sends as `Authorization: Bearer ...`)."""
    return api_key_create(tenant=tenant, name="acme integration", created_by=owner)


@pytest.fixture
def tenant_admin(owner: User) -> User:
    """acme's owner with a staff account: runs acme in the Django admin, and nothing else."""
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    return owner


@pytest.fixture
def other_admin(other_tenant: Tenant) -> User:
    """Staff of globex: a tenant admin there, a stranger to acme."""
    user = _person("globex_admin", other_tenant, Membership.Role.ADMIN)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user
