"""The hashing embedder: what QASSIST_EMBEDDING_MODEL=hashing gives instead of a model."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from pytest_django import Settings

from inference.modelstore import UnknownModelError
from knowledge.embeddings import (
    MAX_CHARS_PER_TOKEN,
    HashingEmbedder,
    UseEmbedder,
    fit_text,
    get_embedder,
    set_embedder,
)


@pytest.fixture
def no_embedder() -> None:
    set_embedder(None)  # the autouse fake goes: settings choose


def test_the_hashing_setting_gives_the_hashing_embedder_without_a_model_file(
    settings: Settings, no_embedder: None
) -> None:
    settings.QASSIST_EMBEDDING_MODEL = "hashing"
    settings.QASSIST_MODELS_DIR = "/nonexistent"
    embedder = get_embedder()
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.name == "hashing"
    assert get_embedder() is embedder  # one per process


def test_another_name_still_needs_its_model_file(settings: Settings, no_embedder: None) -> None:
    settings.QASSIST_EMBEDDING_MODEL = "/nonexistent/e5-small.gguf"
    with pytest.raises((FileNotFoundError, UnknownModelError), match=r"e5-small\.gguf"):
        get_embedder()


def test_texts_sharing_words_are_near_and_others_are_not() -> None:
    embedder = HashingEmbedder()
    passages = embedder.embed_passages(
        ["Hotels: up to EUR 180 a night in Paris.", "年假每年十五天，需经理批准。"]
    )
    queries = embedder.embed_queries(["hotel night Paris price", "年假 几天"])
    assert passages.shape == (2, 512)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0)
    similarity = queries @ passages.T
    assert similarity[0, 0] > similarity[0, 1]
    assert similarity[1, 1] > similarity[1, 0]
    # Deterministic across calls (and processes: the hash is blake2b, not Python's hash()).
    assert np.array_equal(embedder.embed_passages(["Paris"]), embedder.embed_passages(["Paris"]))
    assert embedder.embed_queries([]).shape == (0, 512)


# --- every embedder reads a bounded beginning of a text (issue #32, finding 1) ------------


def test_fit_text_keeps_the_beginning_that_the_tokens_allow() -> None:
    def count(text: str) -> int:
        return len(text.split())

    words = " ".join(f"w{i}" for i in range(1000))
    assert fit_text("a few words", 5, count) == "a few words"
    fitted = fit_text(words, 100, count)
    assert words.startswith(fitted)
    assert 90 <= count(fitted) <= 100
    # Characters are cut before the tokenizer sees them: its own work is bounded too.
    seen: list[int] = []

    def count_seen(text: str) -> int:
        seen.append(len(text))
        return 1

    fit_text("x" * 10_000_000, 10, count_seen)
    assert seen == [10 * MAX_CHARS_PER_TOKEN]


def test_the_hashing_embedder_reads_at_most_its_maximum_of_words() -> None:
    embedder = HashingEmbedder()
    letters = "abcdefghijklmnopqrstuvwxyz"
    head = " ".join(
        "w" + letters[i // 676] + letters[i // 26 % 26] + letters[i % 26]
        for i in range(embedder.max_tokens)
    )
    assert embedder.count_tokens([head, "two words"]) == [embedder.max_tokens, 2]
    longer = head + " something else entirely" * 100
    assert np.array_equal(embedder.embed_passages([longer]), embedder.embed_passages([head]))


@pytest.fixture(scope="module")
def use_embedder() -> UseEmbedder:
    return UseEmbedder(threads=1)


def test_use_embeds_a_long_text_from_its_beginning_in_bounded_memory(
    use_embedder: UseEmbedder,
) -> None:
    """The attack was one 3.9 MB string (21 GB, then the kernel killed the web process: USE's
    forward pass holds about 18 KB per token). Here 60,000 characters, which took about
    300 MB before, within 64 MB now: the text is cut to the model's maximum first."""
    sentence = "The hotel cap per night is EUR 180 in Class A cities. "
    text = sentence * (60_000 // len(sentence))
    counted = use_embedder.count_tokens([text, sentence])
    assert counted[0] > use_embedder.max_tokens
    assert 10 < counted[1] < 30
    use_embedder.embed_passages([sentence])  # warm: the tokenizer's tables are built once
    tracemalloc.start()
    try:
        vectors = use_embedder.embed_passages([text])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MB"
    assert vectors.shape == (1, 512)
    # What it embedded is the text's beginning: the same vector as that beginning alone.
    head = fit_text(text, use_embedder.max_tokens, lambda t: use_embedder.count_tokens([t])[0])
    assert np.allclose(vectors, use_embedder.embed_passages([head]), atol=1e-6)
    assert use_embedder.count_tokens([head])[0] <= use_embedder.max_tokens
