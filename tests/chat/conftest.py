"""Fixtures of the chat tests: an in-process engine over the fake runner."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pytest_django import Settings

from inference.local import LocalEngineClient, RoutedEngineClient
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


# Two models served at once (issue #36), each by its own engine.
SMALL = "smollm2-135m"  # the settings' default model
LARGE = "qwen2.5-coder-1.5b"


def signed(model: str, prompt: str) -> str:
    """A fake reply that names the model whose engine wrote it."""
    return f"{model}: {prompt}"


@pytest.fixture
def runners(settings: Settings) -> Iterator[dict[str, FakeRunner]]:
    """Both models served, an engine each, as embedded mode runs QASSIST_MODELS."""
    settings.QASSIST_MODEL = SMALL
    settings.QASSIST_MODELS = [SMALL, LARGE]
    runners = {m: FakeRunner(reply_for=functools.partial(signed, m)) for m in (SMALL, LARGE)}
    clients = {
        m: LocalEngineClient(functools.partial(make_engine, r), model=m) for m, r in runners.items()
    }
    client = RoutedEngineClient(clients, SMALL)
    client.start()
    set_engine_client(client)
    set_prompt_counter(FakeCounter(runners[SMALL]))
    set_prompt_counter(FakeCounter(runners[LARGE]), model=LARGE)
    yield runners
    set_engine_client(None)
    set_prompt_counter(None)
    for local in clients.values():
        local.stop(timeout=0)
