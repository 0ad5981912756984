"""The real embedded model (SmolLM2-135M) through llama.cpp: the engine end to end."""

import asyncio
import uuid
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import pytest

from inference.engine import Engine
from inference.hostcache import common_prefix_len
from inference.local import LocalEngineClient
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from inference.worker import Submission

pytestmark = pytest.mark.model


def make_engine(model: Path, n_seq_max=4, max_seq_tokens=1024) -> Engine:
    """The real engine on `model`: the path comes from the `embedded_model` fixture, which
    skips without it, never from here (this runs on the engine's thread, as a factory)."""
    from inference.runner import LlamaRunner

    runner = LlamaRunner(
        model,
        n_seq_max=n_seq_max,
        n_ctx=4096,
        max_batch_tokens=128,
        n_threads=2,
        max_seq_tokens=max_seq_tokens,
    )
    return Engine(runner, max_batch_tokens=128, max_queue=16)


@pytest.fixture
def local_client(embedded_model):
    clients = []

    def make(**kwargs):
        client = LocalEngineClient(lambda: make_engine(embedded_model, **kwargs))
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


# --- the host-memory cache and the default sampling path, on the real model -------------------


def make_cached_engine(
    model: Path, n_seq_max=1, host_cache_bytes=256 * 2**20, disk_dir=None
) -> Engine:
    from inference.kvdisk import DiskKvStore, model_fingerprint
    from inference.runner import LlamaRunner

    disk = DiskKvStore(disk_dir, model_fingerprint("0" * 64, "test", "f16")) if disk_dir else None
    runner = LlamaRunner(
        model,
        n_seq_max=n_seq_max,
        n_ctx=4096,
        max_batch_tokens=128,
        n_threads=2,
        max_seq_tokens=1024,
        disk_store=disk,
    )
    return Engine(
        runner,
        max_batch_tokens=128,
        max_queue=16,
        host_cache_bytes=host_cache_bytes,
        host_disk_bytes=256 * 2**20 if disk_dir else 0,
    )


@pytest.fixture
def engines(embedded_model):
    made: list[Engine] = []

    def make(**kwargs):
        engine = make_cached_engine(embedded_model, **kwargs)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.runner.close()


def turn(engine, rid, history, text, params=None, tenant="acme"):
    """One turn run to the end on a synchronously stepped engine: (messages, done, tokens)."""
    messages = [*history, ChatMessage("user", text)]
    params = params or SamplingParams(max_tokens=40, temperature=0)
    assert engine.add_request(rid, messages, params, tenant=tenant) == []
    request = engine.scheduler.get(rid)
    assert request is not None
    reply, done = "", None
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Delta) and event.request_id == rid:
                reply += event.text
            elif isinstance(event, Done) and event.request_id == rid:
                done = event
    assert isinstance(done, Done)
    turn.last_request = request  # type: ignore[attr-defined]
    return [*messages, ChatMessage("assistant", reply)], done, list(request.output_tokens)


def test_a_conversation_restored_from_host_memory_continues_exactly_as_a_kept_one(engines):
    kept = engines()
    history, first, _ = turn(kept, "k1", [], "Name three rivers of Europe.")
    _, kept_done, kept_tokens = turn(kept, "k2", history, "Which one is the longest?")
    assert kept_done.cached_tokens == first.prompt_tokens + first.completion_tokens - 1

    restored = engines()
    history2, _, _ = turn(restored, "r1", [], "Name three rivers of Europe.")
    assert history2 == history
    turn(restored, "other", [], "What is the boiling point of water?")  # takes the sequence
    runner = restored.runner
    assert runner.saved_bytes > 0
    _, restored_done, restored_tokens = turn(restored, "r2", history, "Which one is the longest?")
    assert restored.stats.restored_tokens == restored_done.cached_tokens
    assert restored_done.cached_tokens == kept_done.cached_tokens  # same batch shape after it
    assert restored_tokens == kept_tokens  # the very same tokens at temperature 0


def test_a_conversation_saved_on_disk_continues_exactly_after_a_restart(engines, tmp_path):
    kept = engines()
    history, _, _ = turn(kept, "k1", [], "Name three rivers of Europe.")
    _, kept_done, kept_tokens = turn(kept, "k2", history, "Which one is the longest?")

    before = engines(disk_dir=tmp_path)
    assert turn(before, "r1", [], "Name three rivers of Europe.")[0] == history
    assert before.persist() == 1  # the worker stops: its kept conversation goes to disk
    before.runner.close()
    after = engines(disk_dir=tmp_path)  # a new process, the same model and folder
    assert after.status()["host_cache_disk_entries"] == 1
    _, done, tokens = turn(after, "r2", history, "Which one is the longest?")
    assert after.stats.restored_tokens == done.cached_tokens == kept_done.cached_tokens
    assert tokens == kept_tokens  # the very same tokens at temperature 0


def test_without_the_host_cache_the_returning_conversation_is_recomputed(engines):
    engine = engines(host_cache_bytes=0)
    history, _, _ = turn(engine, "a1", [], "Name three rivers of Europe.")
    turn(engine, "other", [], "What is the boiling point of water?")
    _, done, _ = turn(engine, "a2", history, "Which one is the longest?")
    runner = engine.runner
    held = runner.tokenize_parts(
        runner.render_prompt([ChatMessage("user", "What is the boiling point of water?")])
    )
    asked = runner.tokenize_parts(
        runner.render_prompt([*history, ChatMessage("user", "Which one is the longest?")])
    )
    opening = common_prefix_len(held, asked)  # the template's opening, its default system text
    assert done.cached_tokens <= opening < len(asked) // 2  # nothing of the history


def test_a_regenerated_turn_reuses_only_the_common_prefix(engines):
    engine = engines()
    history, _, _ = turn(engine, "a1", [], "Name three rivers of Europe.")
    _, old_turn, _ = turn(engine, "a2", history, "Which one is the longest?")
    old = turn.last_request  # type: ignore[attr-defined]
    turn(engine, "other", [], "What is the boiling point of water?")  # history saved to host
    _, redo, _ = turn(engine, "a2b", history, "Which one is the shortest?")
    new = turn.last_request  # type: ignore[attr-defined]
    # Exactly the tokens both prompts share come back; the edited message is computed.
    common = common_prefix_len(old.kv_tokens(), new.prompt_tokens)
    assert old_turn.cached_tokens <= common < old_turn.prompt_tokens
    assert redo.cached_tokens == common
    assert engine.stats.restored_tokens == common
    assert redo.finish_reason in {"stop", "length"}


def test_the_default_sampling_path_is_seeded_and_varies_with_the_seed(engines):
    engine = engines(n_seq_max=4)

    def sample(seed, rid):
        params = SamplingParams(
            max_tokens=32, temperature=0.7, top_k=40, top_p=0.95, repeat_penalty=1.1, seed=seed
        )
        assert not params.greedy
        _, done, tokens = turn(engine, rid, [], "Write one sentence about the sea.", params)
        assert done.finish_reason in {"stop", "length"}
        return tokens

    first, again = sample(1234, "s1"), sample(1234, "s2")
    assert first == again  # the same seed draws the same tokens
    others = [sample(seed, f"o{seed}") for seed in (1, 2, 3)]
    assert any(tokens != first for tokens in others)  # other seeds draw other replies
    text = b"".join(engine.runner.token_bytes(t) for t in first).decode("utf-8", "replace")
    assert sum(ch.isalpha() for ch in text) > len(text) / 3  # words, not noise


def decode_step(runner: Any, items: list[Any]) -> list[np.ndarray]:
    """Decode one token for each item (in sequence order, as the runner lays out the batch),
    append the sampled tokens, return each item's logits."""
    from inference.scheduler import SchedulerOutput

    sampled = runner.execute(SchedulerOutput(decodes=items))
    logits = []
    for row, item in enumerate(sorted(items, key=lambda item: item.seq_id)):
        item.request.output_tokens.append(sampled[item.request.request_id])
        ptr = llama_cpp.llama_get_logits_ith(runner.ctx, row)
        logits.append(np.ctypeslib.as_array(ptr, shape=(runner.n_vocab,)).copy())
    return logits


def assert_identical(a: tuple[Any, list[np.ndarray]], b: tuple[Any, list[np.ndarray]]) -> None:
    """Two runs' (tokens, logits of every step): the same tokens, the same logits bit for bit."""
    assert a[0] == b[0]
    assert len(a[1]) == len(b[1])
    assert all(np.array_equal(x, y) for x, y in zip(a[1], b[1], strict=True))


def test_a_packed_kv_pool_computes_exactly_what_a_pool_without_holes_does(embedded_model):
    """Compaction moves two replies' cells down into the hole another conversation left, and
    they go on with exactly the tokens of a pool that never held it. (Left with the hole, new
    tokens land below older ones and llama.cpp's attention sums in another order: with its f16
    accumulation that gives other logits, visibly so on this small model.)"""
    from inference.runner import LlamaRunner
    from inference.scheduler import CompactKv, DecodeItem, KvOp, PrefillChunk, SchedulerOutput
    from inference.types import Request

    def replies(filler: bool) -> tuple[dict[int, list[int]], list[np.ndarray]]:
        runner = LlamaRunner(
            embedded_model, n_seq_max=3, n_ctx=1024, max_batch_tokens=128, n_threads=2,
            max_seq_tokens=512,
        )  # fmt: skip
        try:

            def prompt(text: str) -> list[int]:
                return runner.tokenize_parts(runner.render_prompt([ChatMessage("user", text)]))

            def prefill(seq: int, text: str) -> Request:
                tokens = prompt(text)
                req = Request(f"r{seq}", tokens, SamplingParams(max_tokens=30, temperature=0))
                sampled = runner.execute(
                    SchedulerOutput(prefills=[PrefillChunk(req, seq, 0, tokens)])
                )
                req.output_tokens.append(sampled[req.request_id])
                return req

            if filler:
                prefill(0, "Write a short poem about autumn leaves, with four verses.")
            reqs = [prefill(1, "Name three rivers of Europe."), prefill(2, "Name a mountain.")]
            if filler:  # the filler's cells freed (a hole below the replies'), then packed
                runner.execute(SchedulerOutput(kv_ops=[KvOp(0, 0), CompactKv()]))
            logits = []
            for _ in range(25):
                items = [
                    DecodeItem(r, i + 1, r.output_tokens[-1], r.num_tokens - 1)
                    for i, r in enumerate(reqs)
                ]
                logits += decode_step(runner, items)
            return {i: r.output_tokens for i, r in enumerate(reqs)}, logits
        finally:
            runner.close()

    assert_identical(replies(filler=True), replies(filler=False))


def test_a_reply_moved_to_another_stream_goes_on_exactly_as_if_it_had_stayed(embedded_model):
    """With a stream per sequence, the scheduler moves a running reply down to close a gap (a
    copy of its KV, then the old sequence cleared): it goes on with the very logits it would
    have had in place."""
    from inference.runner import LlamaRunner
    from inference.scheduler import DecodeItem, KvOp, PrefillChunk, SchedulerOutput
    from inference.types import Request

    def reply(move: bool) -> tuple[list[int], list[np.ndarray]]:
        runner = LlamaRunner(
            embedded_model, n_seq_max=3, n_ctx=1024, max_batch_tokens=128, n_threads=2,
            max_seq_tokens=512, kv_unified=False,
        )  # fmt: skip
        try:
            tokens = runner.tokenize_parts(
                runner.render_prompt([ChatMessage("user", "Name three rivers of Europe.")])
            )
            req = Request("r", tokens, SamplingParams(max_tokens=30, temperature=0))
            seq = 2
            sampled = runner.execute(SchedulerOutput(prefills=[PrefillChunk(req, seq, 0, tokens)]))
            req.num_computed = len(tokens)
            req.output_tokens.append(sampled["r"])
            logits = []
            for i in range(20):
                if move and i == 8:
                    held = len(req.kv_tokens())
                    runner.execute(SchedulerOutput(kv_ops=[KvOp(0, 0, seq, held), KvOp(seq, 0)]))
                    seq = 0
                item = DecodeItem(req, seq, req.output_tokens[-1], req.num_tokens - 1)
                logits += decode_step(runner, [item])
            empty = int(llama_cpp.llama_memory_seq_pos_max(runner.memory, 2)) < 0
            assert empty == move  # the old sequence was cleared
            return req.output_tokens, logits
        finally:
            runner.close()

    assert_identical(reply(move=True), reply(move=False))


def test_with_a_stream_per_sequence_a_reply_moved_down_is_the_reply_it_would_have_been(
    embedded_model,
):
    """Through the engine: a short reply in sequence 0 ends, the long one beside it moves down
    into sequence 0 (so running streams stay one pass), and its tokens are those it has when
    it runs alone from the start; its follow-up turn finds the whole history."""
    from inference.runner import LlamaRunner

    def engine() -> Engine:
        runner = LlamaRunner(
            embedded_model, n_seq_max=3, n_ctx=4096, max_batch_tokens=128, n_threads=2,
            max_seq_tokens=1024, kv_unified=False,
        )  # fmt: skip
        return Engine(
            runner, max_batch_tokens=128, max_queue=16, host_cache_bytes=2**26, park_idle_steps=1
        )

    asks = [ChatMessage("user", "Name three rivers of Europe.")]
    long = SamplingParams(max_tokens=40, temperature=0)
    alone = engine()
    try:
        history, alone_done, alone_tokens = turn(alone, "long", [], asks[0].content, long)
    finally:
        alone.runner.close()

    beside = engine()
    try:
        quick = SamplingParams(max_tokens=3, temperature=0)
        beside.add_request("quick", [ChatMessage("user", "Say hi.")], quick, tenant="acme")
        beside.step()
        history2, _, tokens = turn(beside, "long", [], asks[0].content, long)
        assert turn.last_request.seq_id == 0  # type: ignore[attr-defined]  # moved down
        assert tokens == alone_tokens
        assert history2 == history
        _, follow, _ = turn(beside, "next", history, "Which one is the longest?")
        assert follow.cached_tokens == alone_done.prompt_tokens + alone_done.completion_tokens - 1
    finally:
        beside.runner.close()
