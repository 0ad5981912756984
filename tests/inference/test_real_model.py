"""The real embedded model (SmolLM2-135M) through llama.cpp: the engine end to end."""

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from inference import modelstore
from inference.engine import Engine
from inference.local import LocalEngineClient
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from inference.worker import Submission

pytestmark = pytest.mark.model


def model_path() -> Path:
    path = modelstore.resolve_model_path("smollm2-135m", settings.QASSIST_MODELS_DIR)
    if not path.is_file():
        if os.environ.get("QASSIST_REQUIRE_SERVICES"):
            pytest.fail(f"the embedded model is missing at {path}: run manage.py fetch_model")
        pytest.skip(f"the embedded model is missing at {path}")
    return path


def make_engine(n_seq_max=4, max_seq_tokens=1024) -> Engine:
    from inference.runner import LlamaRunner

    runner = LlamaRunner(
        model_path(),
        n_seq_max=n_seq_max,
        n_ctx=4096,
        max_batch_tokens=128,
        n_threads=2,
        max_seq_tokens=max_seq_tokens,
    )
    return Engine(runner, max_batch_tokens=128, max_queue=16)


@pytest.fixture
def local_client():
    clients = []

    def make(**kwargs):
        client = LocalEngineClient(lambda: make_engine(**kwargs))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        if client.worker is not None:
            client.worker.engine.runner.close()


def sub(text, max_tokens=48, history=()):
    messages = (*history, ChatMessage("user", text))
    return Submission(
        uuid.uuid4().hex, messages, SamplingParams(max_tokens=max_tokens, temperature=0)
    )


async def reply(client, submission):
    events = [e async for e in client.generate(submission)]
    text = "".join(e.text for e in events if isinstance(e, Delta))
    return text, events


async def test_concurrent_requests_all_complete_with_sensible_text(local_client):
    client = local_client()
    questions = [
        "What is the capital of France?",
        "Name a primary color.",
        "What is 2 + 2?",
        "Say hello.",
        "What animal says moo?",
        "What color is the sky?",
    ]
    results = await asyncio.gather(*(reply(client, sub(q)) for q in questions))
    for text, events in results:
        assert isinstance(events[-1], Done), events[-1]
        assert events[-1].finish_reason in {"stop", "length"}
        assert len(text.strip()) >= 2
        assert sum(ch.isalpha() for ch in text) > len(text) / 3  # words, not noise
    assert client.worker.engine.stats.steps < sum(e[-1].completion_tokens for _, e in results)


async def test_a_chinese_reply_streams_as_whole_characters(local_client):
    client = local_client()
    text, events = await reply(client, sub("请用中文回答：你好吗？", max_tokens=64))
    deltas = [e.text for e in events if isinstance(e, Delta)]
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    assert isinstance(events[-1], Done)


async def test_a_reused_sequence_does_not_see_the_previous_conversation(local_client):
    client = local_client(n_seq_max=1)
    secret = "Zorblax"
    told, _ = await reply(client, sub(f"My name is {secret}. Please repeat my name."))
    assert secret in told  # the first conversation really holds the name
    asked, _ = await reply(client, sub("What is my name?"))
    assert secret not in asked


async def test_a_follow_up_turn_reuses_the_conversations_kv(local_client):
    client = local_client(n_seq_max=2)
    first = "What is the capital of Italy?"
    answer, first_events = await reply(client, sub(first))
    history = (ChatMessage("user", first), ChatMessage("assistant", answer))
    _, events = await reply(client, sub("And of Spain?", history=history))
    done = events[-1]
    assert isinstance(done, Done)
    # The whole first turn stays in the sequence: its prompt and its reply (bar the last
    # token, never decoded) are reused; only the new turn is prefilled.
    first_done = first_events[-1]
    reused = first_done.prompt_tokens + first_done.completion_tokens - 1
    assert done.cached_tokens >= reused


async def test_closing_the_stream_frees_the_sequence(local_client):
    client = local_client()
    stream = client.generate(sub("Tell me a very long story about a dragon.", max_tokens=400))
    async for event in stream:
        if isinstance(event, Delta):
            break
    await stream.aclose()
    engine = client.worker.engine
    for _ in range(1000):
        if engine.num_running == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.num_running == 0
    assert engine.stats.finished.get("cancelled") == 1


async def test_a_prompt_longer_than_the_context_gets_an_error_not_a_crash(local_client):
    client = local_client(max_seq_tokens=256)
    _, events = await reply(client, sub("word " * 1000))
    assert isinstance(events[-1], Failed)
    assert events[-1].code == "prompt_too_long"
    _, events = await reply(client, sub("Say hi."))  # the engine is still serving
    assert isinstance(events[-1], Done)
