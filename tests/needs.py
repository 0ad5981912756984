"""What the tests need from outside Python, found the way `make run` finds it.

- The embedded model (smollm2-135m) in QASSIST_MODELS_DIR: `make test` fetches it first.
- Redis: QASSIST_TEST_REDIS_URL, else the Redis that answers on 127.0.0.1:6379 (the one
  `make run` would use), on a database of the tests' own: `make run` keeps to database 0.
- PostgreSQL: only one that answers *and* has pgvector, which knowledge's migrations need.

A test that needs what is missing is skipped, saying what is missing and the command that
brings it; with QASSIST_REQUIRE_SERVICES=1 (CI) it fails instead.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, NoReturn

import pytest
from django.conf import settings

from inference import modelstore

EMBEDDED_MODEL = "smollm2-135m"
FETCH_EMBEDDED_MODEL = f"python manage.py fetch_model {EMBEDDED_MODEL}"
# Set by `make test` when it could not fetch the model (no network): the reason, for the skips.
MODEL_FETCH_ERROR_VARIABLE = "QASSIST_TEST_MODEL_FETCH_ERROR"

# Database 15: `make run` uses 0 and the benchmarks 11 to 14.
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/15"
TEST_REDIS_URL = os.environ.get("QASSIST_TEST_REDIS_URL") or DEFAULT_TEST_REDIS_URL

INSTALL_PGVECTOR = "sudo bash .ci/install-pgvector.sh"


def services_required() -> bool:
    return os.environ.get("QASSIST_REQUIRE_SERVICES", "") not in {"", "0"}


def missing(what: str) -> NoReturn:
    """Skip the test for want of `what` (which says how to get it), or fail it in CI."""
    if services_required():
        pytest.fail(f"{what} (QASSIST_REQUIRE_SERVICES=1 makes this a failure)", pytrace=False)
    pytest.skip(what)


def shown(url: str) -> str:
    """A service URL without its password, for messages."""
    return re.sub(r"//([^@/:]*):[^@/]*@", r"//\1:***@", url)


# --- the embedded model -----------------------------------------------------------------------


def embedded_model_file() -> Path:
    """Where the embedded model is (or would be): QASSIST_MODELS_DIR, as `fetch_model` puts it."""
    return modelstore.resolve_model_path(EMBEDDED_MODEL, settings.QASSIST_MODELS_DIR)


def embedded_model() -> Path:
    """The embedded model's path; the test is skipped (failed in CI) when it is not there.

    Call it in the test or a fixture, never in an engine factory: there it would run on the
    engine's thread, where a skip is only the thread's failure to start."""
    path = embedded_model_file()
    if not modelstore.is_present(EMBEDDED_MODEL, settings.QASSIST_MODELS_DIR):
        fetch_error = os.environ.get(MODEL_FETCH_ERROR_VARIABLE)
        why = f": `make test` could not fetch it ({fetch_error})" if fetch_error else ""
        missing(f"the embedded model is missing at {path}{why}; run `{FETCH_EMBEDDED_MODEL}`")
    return path


# --- Redis ------------------------------------------------------------------------------------


@functools.cache
def redis_problem(url: str) -> str | None:
    """Why no Redis answers at `url` (None: one does). Asked once per run and URL."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


def redis_url() -> str:
    """The Redis the tests use: QASSIST_TEST_REDIS_URL, else database 15 of the Redis on
    127.0.0.1:6379. The test is skipped (failed in CI) when it does not answer."""
    problem = redis_problem(TEST_REDIS_URL)
    if problem is not None:
        if os.environ.get("QASSIST_TEST_REDIS_URL"):
            how = "start it, or point QASSIST_TEST_REDIS_URL at one that runs"
        else:
            how = "start one (`sudo apt-get install redis-server`), or set QASSIST_TEST_REDIS_URL"
        missing(f"no Redis answers at {shown(TEST_REDIS_URL)} ({problem}); {how}")
    return TEST_REDIS_URL


# --- PostgreSQL -------------------------------------------------------------------------------

LOCAL_POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres"}
# libpq's own options that DATABASE_URL's query string may carry (psycopg's pool is not one).
_LIBPQ_OPTIONS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "passfile", "service", "options"}

# Why this run does not use DATABASE_URL's PostgreSQL (None: it does, or none was set): filled
# by tests/conftest.py at the start of the run.
postgres_passed_over: str | None = None


def postgres_problem(**params: Any) -> str | None:
    """Why qassist cannot use the PostgreSQL server of these connection parameters (None: it
    can). It must answer and have pgvector, which knowledge's migrations create."""
    import psycopg

    try:
        with psycopg.connect(**params, connect_timeout=3, autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            has_pgvector = row.fetchone() is not None
    except psycopg.OperationalError as exc:
        problem = " ".join(str(exc).split()) or type(exc).__name__
        if "does not exist" in problem and params.get("dbname", "postgres") != "postgres":
            # The database may be made later (pytest-django's test_<name>): its server's
            # `postgres` database is asked instead, as Django itself does.
            return postgres_problem(**{**params, "dbname": "postgres"})
        return f"PostgreSQL at {describe_postgres(params)} does not answer ({problem})"
    if not has_pgvector:
        return (
            f"PostgreSQL at {describe_postgres(params)} has no pgvector, which company "
            f"knowledge needs; install it with `{INSTALL_PGVECTOR}`"
        )
    return None


def describe_postgres(params: dict[str, Any]) -> str:
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    return f"{user}{params.get('host') or 'localhost'}{port}/{params.get('dbname') or ''}"


def postgres_params_of_settings() -> dict[str, Any] | None:
    """The connection parameters of settings.DATABASES (None: it is not PostgreSQL)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        return None
    given = {"host": db.get("HOST"), "port": db.get("PORT"), "user": db.get("USER")}
    params: dict[str, Any] = {k: v for k, v in given.items() if v}
    if db.get("PASSWORD"):
        params["password"] = db.get("PASSWORD")
    params["dbname"] = db.get("NAME") or "postgres"
    options = db.get("OPTIONS") or {}
    params.update({k: v for k, v in options.items() if k in _LIBPQ_OPTIONS})
    return params
