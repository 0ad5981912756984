"""PostgreSQL drops every connection (a restart, a failover) under a live daphne that keeps
connections open (CONN_MAX_AGE): the next request reconnects by itself instead of failing on a
dead one.

Page requests run on a thread per request under ASGI, so they rarely reuse a connection; the
websocket consumer runs all its database work on one thread and reuses its connection from one
message to the next: that is where a dead connection bit (an `internal` error) until
CONN_HEALTH_CHECKS was turned on.

Needs PostgreSQL with pgvector (DATABASE_URL pointing at one, as in CI); skipped on SQLite.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import websockets

from tests import needs
from tests.qassist.test_database_outage import PASSWORD, Live, _free_port, _run, logged_in

REPO = Path(__file__).resolve().parents[2]
SERVER_URL = os.environ.get("DATABASE_URL", "")


@pytest.fixture
def postgres_live(tmp_path: Path) -> Iterator[tuple[Live, str]]:
    if needs.postgres_passed_over:
        needs.missing(f"DATABASE_URL: {needs.postgres_passed_over}")
    if needs.postgres_params_of_settings() is None:
        pytest.skip("DATABASE_URL is not a PostgreSQL server (with pgvector): SQLite here")
    name = f"qassist_restart_{uuid.uuid4().hex[:8]}"
    admin_url = SERVER_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = SERVER_URL.rsplit("/", 1)[0] + f"/{name}"
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "QASSIST_ENGINE", "DEBUG"}}
    env.update(
        DJANGO_SETTINGS_MODULE="qassist.settings",
        QASSIST_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=url,
        SECRET_KEY=secrets.token_urlsafe(40),
        # The embedded model, small, for the websocket test; loaded only when a chat needs it.
        QASSIST_MODELS_DIR=str(needs.embedded_model_file().parent),
        QASSIST_PARALLEL="2",
        QASSIST_CONTEXT_SIZE="2048",
        QASSIST_MAX_SEQ_TOKENS="1024",
        QASSIST_DEFAULT_MAX_TOKENS="8",
        QASSIST_GENERATE_TITLES="0",
        QASSIST_PRELOAD_ENGINE="0",
        QASSIST_SEED_PASSWORD=PASSWORD,
        PYTHONUNBUFFERED="1",
    )
    env.pop("QASSIST_MODEL", None)
    port = _free_port()
    log = tmp_path / "daphne.log"
    server = None
    try:
        _run(["manage.py", "migrate", "--noinput", "-v", "0"], env)
        _run(["-m", "tests.browser.seed"], env)
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
        live_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{live_url}/accounts/login/", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(log.read_text()) from None
                time.sleep(0.2)
        yield Live(live_url, tmp_path, log), name
    finally:
        if server is not None:
            server.terminate()
            server.wait(15)
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def terminate_connections(name: str) -> int:
    admin_url = SERVER_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM ("
            " SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()) AS t",
            (name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_after_the_database_drops_every_connection_the_next_requests_are_served(
    postgres_live: tuple[Live, str],
) -> None:
    live, name = postgres_live
    client = logged_in(live)
    for _ in range(3):
        assert client.get("/").status_code == 200

    terminate_connections(name)

    assert client.get("/").status_code == 200
    assert client.get("/sessions/", headers={"Accept": "application/json"}).status_code == 200
    assert "Traceback" not in live.log.read_text()


async def _turn(ws: Any, content: str) -> list[dict[str, Any]]:
    await ws.send(json.dumps({"type": "chat.send", "session": None, "content": content}))
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        frames.append(frame)
        if frame["type"] == "reply.done" or (frame["type"] == "error" and "reply_id" not in frame):
            return frames


@pytest.mark.model
def test_an_open_chat_socket_reconnects_to_the_database_after_it_dropped_every_connection(
    postgres_live: tuple[Live, str],
) -> None:
    """The websocket consumer reuses one connection across messages: the one that dies."""
    live, name = postgres_live
    needs.embedded_model()  # skips (fails in CI) without it
    client = logged_in(live)
    cookie = client.cookies["sessionid"]

    async def scenario() -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
        url = live.url.replace("http://", "ws://") + "/ws/chat/"
        headers = {"Cookie": f"sessionid={cookie}"}
        origin: Any = live.url
        async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:
            before = await _turn(ws, "Say OK.")
            killed = await asyncio.to_thread(terminate_connections, name)
            after = await _turn(ws, "Say OK again.")
        return before, killed, after

    before, killed, after = asyncio.run(scenario())
    assert before[0]["type"] == "reply.start", before
    assert killed >= 1, "daphne kept no connection open"
    assert after[0]["type"] == "reply.start", after  # stored through a fresh connection
    assert after[-1]["type"] == "reply.done"
    assert after[-1]["reply"]["status"] == "complete"
    assert "Traceback" not in live.log.read_text()
