from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.test import Client
from pytest_django import Settings

from inference.service import set_engine_client
from inference.types import Event
from inference.worker import Submission
from qassist import views
from tests import needs

pytestmark = pytest.mark.django_db


class FakeEngineClient:
    """Answers health() with a canned report, or hangs, or fails."""

    def __init__(self, report: dict[str, Any] | None = None, *, hang: bool = False) -> None:
        self.report = report if report is not None else {"mode": "fake", "ok": True}
        self.hang = hang

    def generate(self, sub: Submission) -> AsyncIterator[Event]:
        raise NotImplementedError

    async def served_models(self) -> list[str]:
        return []

    async def cancel(self, request_id: str) -> None:
        raise NotImplementedError

    def at_capacity(self, model: str = "") -> bool:
        return False  # its refusals come from the engine path

    async def health(self) -> dict[str, Any]:
        if self.hang:
            await asyncio.sleep(60)
        return self.report


@pytest.fixture
def engine() -> Iterator[FakeEngineClient]:
    fake = FakeEngineClient()
    set_engine_client(fake)
    yield fake
    set_engine_client(None)


@pytest.fixture
def embedded(settings: Settings) -> None:
    settings.REDIS_URL = ""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_it_answers_200_when_every_part_answers(
    client: Client, engine: FakeEngineClient, embedded: None
) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["down"] == []
    assert body["database"]["ok"] is True
    assert body["redis"] == {"mode": "embedded"}
    assert body["engine"] == {"mode": "fake", "ok": True}
    assert response["Cache-Control"].startswith("max-age=0")


def test_it_answers_503_and_names_the_engine_when_no_worker_answers(
    client: Client, engine: FakeEngineClient, embedded: None
) -> None:
    engine.report = {"mode": "redis", "ok": False, "workers": [], "queued": 3}
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["down"] == ["engine"]
    assert body["engine"]["queued"] == 3


def test_a_hanging_engine_becomes_a_timeout_not_a_hang(
    client: Client, engine: FakeEngineClient, embedded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "ENGINE_TIMEOUT", 0.05)
    engine.hang = True
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["down"] == ["engine"]
    assert "no answer within" in response.json()["engine"]["error"]


def test_an_engine_client_that_cannot_be_made_is_reported(
    client: Client, embedded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("model file is missing")

    monkeypatch.setattr(views, "get_engine_client", broken)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["engine"] == {
        "ok": False,
        "error": "RuntimeError: model file is missing",
    }


def test_it_answers_503_and_names_redis_when_redis_is_unreachable(
    client: Client, engine: FakeEngineClient, settings: Settings
) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["down"] == ["redis"]
    assert body["redis"]["ok"] is False
    assert body["redis"]["error"]


def test_it_answers_503_and_names_the_database_when_it_fails(
    client: Client, engine: FakeEngineClient, embedded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_database() -> dict[str, Any]:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(views, "_select_one", no_database)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["down"] == ["database"]
    assert "connection refused" in response.json()["database"]["error"]


def test_it_refuses_writes(client: Client, engine: FakeEngineClient, embedded: None) -> None:
    assert client.post("/healthz").status_code == 405


@pytest.mark.redis
def test_it_answers_200_with_a_real_redis(
    client: Client, engine: FakeEngineClient, settings: Settings
) -> None:
    settings.REDIS_URL = needs.redis_url()
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["redis"] == {"ok": True}


# --- who sees the details ----------------------------------------------------------------------


REMOTE: Any = {"REMOTE_ADDR": "203.0.113.9"}


def test_an_anonymous_remote_caller_hears_only_the_status_and_what_is_down(
    client: Client, engine: FakeEngineClient, embedded: None
) -> None:
    engine.report = {"mode": "redis", "ok": False, "workers": [{"id": "w1"}], "queued": 3}
    response = client.get("/healthz", **REMOTE)
    assert response.status_code == 503
    assert response.json() == {
        "status": "degraded",
        "down": ["engine"],
        "database": {"ok": True},
        "redis": {"mode": "embedded"},
        "engine": {"mode": "redis", "ok": False},
    }


def test_a_request_that_came_through_a_proxy_is_not_local(
    client: Client, engine: FakeEngineClient, embedded: None
) -> None:
    response = client.get("/healthz", headers={"X-Forwarded-For": "203.0.113.9"})
    assert "model" not in response.json()
    assert response.json()["engine"] == {"mode": "fake", "ok": True}


def test_staff_see_the_details_from_anywhere(
    client: Client, engine: FakeEngineClient, embedded: None, admin_user: Any
) -> None:
    client.force_login(admin_user)
    body = client.get("/healthz", **REMOTE).json()
    assert body["model"]
    assert body["database"]["vendor"]


def test_a_logged_in_non_staff_user_does_not(
    client: Client, engine: FakeEngineClient, embedded: None, member: Any
) -> None:
    client.force_login(member)
    body = client.get("/healthz", **REMOTE).json()
    assert "model" not in body
    assert body["database"] == {"ok": True}
