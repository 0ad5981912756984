"""Several models served at once (issue #36): a worker per model over a real Redis, an engine
per model in embedded mode; the fake runner behind each, answering with its model's name."""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from inference import metrics
from inference.local import LocalEngineClient, RoutedEngineClient
from inference.transport import Keys, RedisEngineClient, RedisWorkerTransport
from inference.types import ChatMessage, Delta, Done, Event, Failed, SamplingParams
from inference.worker import EngineWorker, Submission
from tests import needs
from tests.fakes import FakeRunner, make_engine

REDIS_URL = needs.TEST_REDIS_URL


@pytest.fixture
def prefix() -> Iterator[str]:
    needs.redis_url()  # skips (fails in CI) when no Redis answers there
    name = f"qtest-{uuid.uuid4().hex[:8]}"
    yield name
    r = redis.Redis.from_url(REDIS_URL)
    keys = list(r.scan_iter(f"{name}:*"))
    if keys:
        r.delete(*keys)


def runner_for(model: str) -> FakeRunner:
    return FakeRunner(reply_for=lambda prompt: f"{model} says {prompt}")


class ModelWorker:
    """`run_inference_worker --model NAME` on a thread, a fake runner behind it."""

    def __init__(self, prefix: str, model: str) -> None:
        self.runner = runner_for(model)
        self.transport = RedisWorkerTransport(REDIS_URL, prefix=prefix, model=model)
        self.worker = EngineWorker(
            make_engine(self.runner), self.transport, idle_wait=0.05, heartbeat_interval=0.2
        )
        self.thread = threading.Thread(target=self.worker.run_forever, daemon=True)

    def __enter__(self) -> ModelWorker:
        self.worker.maybe_heartbeat(force=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop_event.set()
        self.thread.join(5)
        self.transport.retire()
        self.transport.close()

    def prompts_seen(self) -> list[str]:
        return list(self.runner.prompts.values())


def sub(text: str, model: str = "") -> Submission:
    return Submission(
        uuid.uuid4().hex, (ChatMessage("user", text),), SamplingParams(temperature=0), model=model
    )


def client(prefix: str, **kwargs: Any) -> RedisEngineClient:
    return RedisEngineClient(REDIS_URL, prefix=prefix, poll_seconds=0.2, **kwargs)


async def collect(c: Any, s: Submission) -> list[Event]:
    return [e async for e in c.generate(s)]


def text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


@pytest.mark.redis
async def test_each_worker_takes_only_its_own_models_requests(prefix: str) -> None:
    c = client(prefix, default_model="small")
    asks = [sub(f"q{i}", model="large" if i % 2 else "small") for i in range(8)]
    with ModelWorker(prefix, "small") as small, ModelWorker(prefix, "large") as large:
        results = await asyncio.gather(*(collect(c, s) for s in asks))

    for ask, events in zip(asks, results, strict=True):
        assert isinstance(events[-1], Done)
        assert text(events) == f"{ask.model} says {ask.messages[0].content}"
    assert sorted(small.prompts_seen()) == ["q0", "q2", "q4", "q6"]
    assert sorted(large.prompts_seen()) == ["q1", "q3", "q5", "q7"]


@pytest.mark.redis
async def test_a_request_naming_no_model_goes_to_the_default_models_worker(prefix: str) -> None:
    c = client(prefix, default_model="small")
    with ModelWorker(prefix, "large"), ModelWorker(prefix, "small"):
        events = await collect(c, sub("hello"))

    assert text(events) == "small says hello"


@pytest.mark.redis
async def test_a_model_nobody_serves_is_refused_naming_it_and_never_queued(prefix: str) -> None:
    c = client(prefix, default_model="small")
    with ModelWorker(prefix, "small") as small:
        events = await collect(c, sub("hi", model="huge"))

    [event] = events
    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert event.message == "No inference worker serves the model 'huge'."
    r = redis.Redis.from_url(REDIS_URL)
    assert r.zcard(Keys(prefix, "huge").queue) == 0
    assert small.prompts_seen() == []


@pytest.mark.redis
async def test_a_busy_models_queue_is_not_taken_by_an_idle_worker_of_another(
    prefix: str,
) -> None:
    # A "large" worker that beats but takes nothing: its model's request waits in its queue
    # while the idle "small" worker polls its own.
    stuck = RedisWorkerTransport(REDIS_URL, prefix=prefix, model="large")
    stuck.heartbeat({})
    c = client(prefix, default_model="small")
    r = redis.Redis.from_url(REDIS_URL)
    with ModelWorker(prefix, "small") as small:
        ask = sub("for large", model="large")
        waiting = asyncio.ensure_future(collect(c, ask))
        for _ in range(50):
            if r.zcard(Keys(prefix, "large").queue):
                break
            await asyncio.sleep(0.02)
        # The small worker polls many times while the request waits (idle_wait is 0.05 s).
        answered = await collect(c, sub("for small", model="small"))
        await asyncio.sleep(0.3)
        assert r.zcard(Keys(prefix, "large").queue) == 1
        await c.cancel(ask.request_id)
        cancelled = await asyncio.wait_for(waiting, 5)

    assert text(answered) == "small says for small"
    assert small.prompts_seen() == ["for small"]
    assert isinstance(cancelled[-1], Done)
    assert cancelled[-1].finish_reason == "cancelled"
    stuck.retire()
    stuck.close()


@pytest.mark.redis
async def test_served_models_health_and_metrics_name_each_workers_model(prefix: str) -> None:
    c = client(prefix, default_model="small")
    with ModelWorker(prefix, "small"), ModelWorker(prefix, "large"):
        served = await c.served_models()
        health = await c.health()

    assert served == ["large", "small"]
    assert health["models"] == ["large", "small"]
    assert sorted(w["model"] for w in health["workers"]) == ["large", "small"]
    body = metrics.render(health).decode()
    for worker in health["workers"]:
        assert f'qassist_worker_info{{model="{worker["model"]}",worker="{worker["id"]}"}} 1.0' in (
            body
        )


# --- embedded mode: an engine per model in the web process -------------------------------------


@pytest.fixture
def routed() -> Iterator[tuple[RoutedEngineClient, dict[str, FakeRunner]]]:
    runners = {m: runner_for(m) for m in ("small", "large")}
    clients = {
        m: LocalEngineClient(functools.partial(make_engine, r), model=m) for m, r in runners.items()
    }
    client = RoutedEngineClient(clients, "small")
    client.start()
    yield client, runners
    for local in clients.values():
        local.stop()


async def test_embedded_each_request_goes_to_its_models_engine(
    routed: tuple[RoutedEngineClient, dict[str, FakeRunner]],
) -> None:
    client, runners = routed

    small, large, default = await asyncio.gather(
        collect(client, sub("a", model="small")),
        collect(client, sub("b", model="large")),
        collect(client, sub("c")),
    )

    assert (text(small), text(large), text(default)) == (
        "small says a",
        "large says b",
        "small says c",
    )
    assert sorted(runners["small"].prompts.values()) == ["a", "c"]
    assert list(runners["large"].prompts.values()) == ["b"]
    assert await client.served_models() == ["small", "large"]


async def test_embedded_a_model_not_loaded_is_refused_naming_it(
    routed: tuple[RoutedEngineClient, dict[str, FakeRunner]],
) -> None:
    client, runners = routed

    [event] = await collect(client, sub("hi", model="huge"))

    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert "'huge'" in event.message
    assert runners["small"].prompts == {}
    assert runners["large"].prompts == {}


async def test_embedded_health_shows_each_engines_model(
    routed: tuple[RoutedEngineClient, dict[str, FakeRunner]],
) -> None:
    client, _ = routed
    for local in client.clients.values():
        assert local.wait_ready(10)
        await collect(client, sub("warm", model=local.model))

    health = await client.health()

    assert health["models"] == ["small", "large"]
    assert sorted(w["model"] for w in health["workers"]) == ["large", "small"]


async def test_a_single_embedded_engine_refuses_another_model() -> None:
    local = LocalEngineClient(lambda: make_engine(runner_for("small")), model="small")
    try:
        [event] = await collect(local, sub("hi", model="large"))
    finally:
        local.stop()

    assert isinstance(event, Failed)
    assert "'large'" in event.message


# --- run_inference_worker --model ---------------------------------------------------------------


def test_the_worker_command_refuses_an_unknown_or_missing_model_in_one_line(
    settings: Any, tmp_path: Any
) -> None:
    from django.core.management import CommandError, call_command

    settings.REDIS_URL = REDIS_URL
    settings.QASSIST_MODELS_DIR = tmp_path

    with pytest.raises(CommandError, match="'gpt-5' is neither a known model"):
        call_command("run_inference_worker", "--model", "gpt-5")
    fetch = re.escape("run `python manage.py fetch_model qwen2.5-coder-1.5b`")
    with pytest.raises(CommandError, match=fetch):
        call_command("run_inference_worker", "--model", "qwen2.5-coder-1.5b")
