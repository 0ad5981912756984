"""Fixtures of the chat tests: an in-process engine over the fake runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from inference.local import LocalEngineClient
from inference.service import set_engine_client, set_prompt_counter
from tests.fakes import FakeCounter, FakeRunner, make_engine


@dataclass
class FakeEngine:
    runner: FakeRunner
    client: LocalEngineClient


@pytest.fixture
def use_engine() -> Iterator[Callable[..., FakeEngine]]:
    """Put an in-process engine over a FakeRunner behind the consumer."""
    clients: list[LocalEngineClient] = []

    def start(runner: FakeRunner | None = None, **engine_kwargs: Any) -> FakeEngine:
        runner = runner or FakeRunner()
        set_prompt_counter(FakeCounter(runner))
        client = LocalEngineClient(lambda: make_engine(runner, **engine_kwargs))
        client.start()
        assert client.wait_ready(5)
        clients.append(client)
        set_engine_client(client)
        return FakeEngine(runner, client)

    yield start
    set_engine_client(None)
    for client in clients:
        client.stop(timeout=0)  # its idle engine thread ends on its own within idle_wait


@pytest.fixture
def engine(use_engine: Callable[..., FakeEngine]) -> FakeEngine:
    return use_engine()
