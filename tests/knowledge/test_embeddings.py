"""The hashing embedder: what QASSIST_EMBEDDING_MODEL=hashing gives instead of a model."""

from __future__ import annotations

import numpy as np
import pytest
from pytest_django import Settings

from inference.modelstore import UnknownModelError
from knowledge.embeddings import HashingEmbedder, get_embedder, set_embedder


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
