"""Passage KV computed once, on the real embedded model (SmolLM2-135M) through llama.cpp: keys
moved by inference.kvblob are the keys llama.cpp computes at the new position, and an answer
whose passages' KV was placed, not computed, names the passage's figure."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from inference import kvblob
from inference.engine import Engine
from inference.prompt_passages import PassageSet
from inference.runner import LlamaRunner
from inference.types import ChatMessage, Delta, SamplingParams
from knowledge import prompt

pytestmark = pytest.mark.model

SYSTEM = ChatMessage("system", "You answer questions from the passages given.")
PASSAGES = [
    prompt.PassageText(
        1, "Canteen", "", "The canteen on the ground floor opens at 11:30 and closes at 14:00."
    ),
    prompt.PassageText(
        2,
        "Guest Wi-Fi",
        "",
        "The guest Wi-Fi network is called Northwind-Guest and its password is BlueFalcon42.",
    ),
]


class Runners(list[LlamaRunner]):
    model: Path


@pytest.fixture
def runners(embedded_model: Path) -> Iterator[Runners]:
    made = Runners()
    made.model = embedded_model  # resolved (or skipped) by the fixture, never in a factory
    yield made
    for runner in made:
        runner.close()


def runner_for(made: Runners, *, unified: bool = True) -> LlamaRunner:
    runner = LlamaRunner(
        made.model,
        n_seq_max=4,
        n_ctx=4096,
        max_batch_tokens=128,
        n_threads=2,
        max_seq_tokens=1024,
        kv_unified=unified,
    )
    made.append(runner)
    return runner


@pytest.mark.parametrize("unified", [True, False], ids=["pool", "streams"])
def test_an_answer_from_placed_passage_kv_names_the_passages_figure(
    runners: Runners, unified: bool
) -> None:
    runner = runner_for(runners, unified=unified)
    assert runner.passage_kv
    engine = Engine(
        runner,
        max_batch_tokens=128,
        max_queue=16,
        passage_kv=True,
        find_passages=prompt.passage_spans,
    )
    bodies = tuple(prompt.passage_body(p.title, p.where, p.text) for p in PASSAGES)
    engine.sync_passages([PassageSet("acme", 1, (SYSTEM,), bodies, bodies)])
    for _ in range(1000):
        engine.idle()
        if not engine.has_work:
            break
        engine.step()
    assert engine.stats.passages_computed == 2
    content = prompt.user_content("What is the password of the guest Wi-Fi?", PASSAGES)
    params = SamplingParams(temperature=0, max_tokens=40)
    messages = [SYSTEM, ChatMessage("user", content)]
    assert engine.add_request("q", messages, params, tenant="acme") == []
    reply = ""
    for _ in range(1000):
        if not engine.has_work:
            break
        reply += "".join(e.text for e in engine.step() if isinstance(e, Delta))
    assert "BlueFalcon42" in reply
    # Both passages' KV was placed (the second moved past the first), none of it computed.
    assert engine.stats.placed_tokens > 40
    assert engine.stats.passage_tokens_computed == 0


def _decode(runner: LlamaRunner, seq: int, tokens: list[int], start: int) -> None:
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = seq, 0
        assert llama_cpp.llama_decode(runner.ctx, batch) == 0
    finally:
        llama_cpp.llama_batch_free(batch)


def _cells(runner: LlamaRunner, seq: int) -> kvblob.Cells:
    size = int(llama_cpp.llama_state_seq_get_size(runner.ctx, seq))
    blob = np.empty(size, dtype=np.uint8)
    ptr = blob.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
    written = int(llama_cpp.llama_state_seq_get_data(runner.ctx, ptr, size, seq))
    return kvblob.parse(blob[:written], n_layer=runner.n_layer)


def test_keys_moved_in_the_blob_are_those_llama_cpp_computes_at_the_new_position(
    runners: Runners,
) -> None:
    runner = runner_for(runners)
    assert runner._rope is not None
    anchor = runner.tokenize_parts(runner.render_prompt([SYSTEM]))
    passage = runner.tokenizer.tokenize(prompt.passage_text(PASSAGES[1]), special=False)
    a, n = len(anchor), len(passage)
    # The same tokens, once from position 0 and once from position 37: relative positions are
    # equal, so the second's keys are the first's rotated by 37 positions.
    _decode(runner, 0, anchor + passage, 0)
    _decode(runner, 1, anchor + passage, 37)
    here = _cells(runner, 0).span(a, a + n)
    there = _cells(runner, 1).span(37 + a, 37 + a + n)
    moved = here.moved(37 + a, runner._rope)
    assert list(moved.positions) == list(there.positions)
    # The two computations differ a little anyway (f16 arithmetic at other positions): the
    # values, which no rotation touches, say by how much. Moved keys are as close as that;
    # keys left where they were are far off.
    for layer, (mine, theirs, before) in enumerate(
        zip(moved.keys, there.keys, here.keys, strict=True)
    ):
        k_theirs = theirs.view(np.float16).astype(np.float32)
        k_off = _mean_off(mine, theirs)
        v_off = _mean_off(moved.values[layer], there.values[layer])
        assert k_off < 2 * v_off + 0.002, layer
        assert k_off < 0.1 * _mean_off(before, theirs), layer
        assert k_theirs.any()
    # The first layer's keys come from the tokens' embeddings alone: there, only the rotation
    # differs, and it is exact to f16 rounding (measured 0.0002 of the keys' mean magnitude).
    assert _mean_off(moved.keys[0], there.keys[0]) < 0.002


def _mean_off(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two f16 arrays, relative to the second's mean magnitude."""
    x, y = a.view(np.float16).astype(np.float32), b.view(np.float16).astype(np.float32)
    return float(np.abs(x - y).mean() / np.abs(y).mean())
