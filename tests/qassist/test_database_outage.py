"""The database goes away under a live daphne, then comes back: 503 pages and JSON meanwhile,
no traceback in the log, and service again by itself afterwards.

A real outage, not a mock: the live server's SQLite database sits in a folder that the test
renames away (SQLite then cannot open it: "unable to open database file") and back.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"


@dataclass
class Live:
    url: str
    db_dir: Path
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str], env: dict[str, str]) -> None:
    # Fixed arguments: this interpreter running the repository's own modules.
    done = subprocess.run(  # noqa: S603
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "REDIS_URL",
            "DATABASE_URL",
            "QASSIST_ENGINE",
            "QASSIST_MODEL",
            "DEBUG",
            "QASSIST_HTTPS",
        }
    }
    env.update(
        DJANGO_SETTINGS_MODULE="qassist.settings",
        QASSIST_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{db_dir / 'qassist.sqlite3'}",
        SECRET_KEY=secrets.token_urlsafe(40),
        QASSIST_MODELS_DIR=str(tmp_path / "no-models"),  # no engine needed here
        QASSIST_PRELOAD_ENGINE="0",
        QASSIST_SEED_PASSWORD=PASSWORD,
        PYTHONUNBUFFERED="1",
    )
    _run(["manage.py", "migrate", "--noinput", "-v", "0"], env)
    _run(["-m", "tests.browser.seed"], env)
    port = _free_port()
    log = tmp_path / "daphne.log"
    with log.open("w") as out:
        # Fixed arguments: this interpreter running daphne on the repository's application.
        server = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "qassist.asgi:application",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/accounts/login/", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(log.read_text()) from None
                time.sleep(0.2)
        yield Live(url, db_dir, log)
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def logged_in(live: Live) -> httpx.Client:
    client = httpx.Client(base_url=live.url, timeout=10)
    client.get("/accounts/login/")
    response = client.post(
        "/accounts/login/",
        data={
            "username": "alice",
            "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert response.status_code == 302, response.text
    return client


def test_with_the_database_gone_pages_and_json_answer_503_and_service_comes_back(
    live: Live,
) -> None:
    client = logged_in(live)
    assert client.get("/").status_code == 200

    gone = live.db_dir.with_name("db-away")
    live.db_dir.rename(gone)
    try:
        page = client.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 503
        assert "cannot reach its database" in page.text
        assert page.headers["Retry-After"]
        # Served by daphne: the async middleware chain adds the policy too.
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]

        api = client.get("/sessions/", headers={"Accept": "application/json"})
        assert api.status_code == 503
        assert api.json()["error"]["code"] == "database_unavailable"

        health = httpx.get(f"{live.url}/healthz", timeout=10)
        assert health.status_code == 503
        assert "database" in health.json()["down"]
    finally:
        gone.rename(live.db_dir)

    # Back: the very next requests are served, nothing restarted.
    assert client.get("/").status_code == 200
    assert client.get("/sessions/", headers={"Accept": "application/json"}).status_code == 200

    log = live.log.read_text()
    assert "database unavailable for GET /" in log
    assert "Traceback" not in log
