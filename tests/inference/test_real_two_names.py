"""The real embedded model served under two names at once (issue #36): two engines in one
process, each request answered by the engine of the name it asks for. Fetches nothing new:
both names are the embedded model (smollm2-135m by its registry name and by its path)."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference.engine import Engine
from inference.local import LocalEngineClient, RoutedEngineClient
from inference.types import ChatMessage, Delta, Done, Event, Failed, SamplingParams
from inference.worker import Submission
from tests import needs

pytestmark = pytest.mark.model


def real_engine(model: Path) -> Engine:
    from inference.runner import LlamaRunner

    runner = LlamaRunner(
        model, n_seq_max=2, n_ctx=2048, max_batch_tokens=128, n_threads=2, max_seq_tokens=1024
    )
    return Engine(runner, max_batch_tokens=128, max_queue=8)


@pytest.fixture
def two_names(embedded_model: Path) -> Iterator[tuple[RoutedEngineClient, str, str]]:
    by_name, by_path = needs.EMBEDDED_MODEL, str(embedded_model)
    clients = {
        name: LocalEngineClient(functools.partial(real_engine, embedded_model), model=name)
        for name in (by_name, by_path)
    }
    routed = RoutedEngineClient(clients, by_name)
    routed.start()
    yield routed, by_name, by_path
    for client in clients.values():
        client.stop()
        if client.worker is not None:
            client.worker.engine.runner.close()


def sub(text: str, model: str) -> Submission:
    return Submission(
        uuid.uuid4().hex,
        (ChatMessage("user", text),),
        SamplingParams(max_tokens=24, temperature=0),
        tenant=f"asks-{model[-6:]}",
        model=model,
    )


async def answer(client: RoutedEngineClient, s: Submission) -> tuple[str, list[Event]]:
    events = [e async for e in client.generate(s)]
    return "".join(e.text for e in events if isinstance(e, Delta)), events


async def test_each_name_is_answered_by_its_own_engine(
    two_names: tuple[RoutedEngineClient, str, str],
) -> None:
    client, by_name, by_path = two_names
    question = "What is the capital of France?"

    (first, first_events), (second, second_events) = await asyncio.gather(
        answer(client, sub(question, by_name)), answer(client, sub(question, by_path))
    )

    assert isinstance(first_events[-1], Done)
    assert isinstance(second_events[-1], Done)
    assert len(first.strip()) >= 2
    assert first == second  # the same weights, greedy: two engines, one answer
    for name, local in client.clients.items():
        assert local.worker is not None
        # Each engine took exactly the request that named it, and no other.
        assert local.worker.engine.status()["tenants"] == {f"asks-{name[-6:]}": 1}
    assert sorted(await client.served_models()) == sorted([by_name, by_path])


async def test_a_name_no_engine_has_is_refused_at_once(
    two_names: tuple[RoutedEngineClient, str, str],
) -> None:
    client, _, _ = two_names

    [event] = [e async for e in client.generate(sub("hi", "qwen2.5-coder-1.5b"))]

    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert "'qwen2.5-coder-1.5b'" in event.message
