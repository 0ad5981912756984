"""Django's view of the engine: build it from settings, and one client per web process.

Mode: `QASSIST_ENGINE=redis` (a separate `run_inference_worker` per machine, reached over Redis),
`embedded` (the engine on a thread of this process) or `auto` (redis when REDIS_URL is set).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from inference import metrics, modelstore
from inference.budget import HostTurns, Turn
from inference.engine import Engine
from inference.prompt_passages import PassageFinder, PassageSource
from inference.types import ChatMessage, Event
from inference.worker import Submission

logger = logging.getLogger(__name__)

# Where company knowledge's passages are in a user message, and what its index holds: the
# knowledge app registers both (knowledge/apps.py), so the engine knows nothing of its format.
_passage_hooks: tuple[PassageFinder, PassageSource] | None = None


def register_passages(find: PassageFinder, source: PassageSource) -> None:
    global _passage_hooks
    _passage_hooks = (find, source)


class EngineClient(Protocol):
    def generate(self, sub: Submission) -> AsyncIterator[Event]: ...
    async def cancel(self, request_id: str) -> None: ...
    async def health(self) -> dict[str, Any]: ...
    # The model's queue is full now (sync: admission asks it); "" is the default model.
    def at_capacity(self, model: str = "") -> bool: ...
    async def served_models(self) -> list[str]: ...  # the models an engine serves now


class PromptCounter(Protocol):
    """The web process's view of the model's tokenizer: how many tokens a conversation takes
    as a prompt, and how many one conversation may hold."""

    @property
    def max_seq_tokens(self) -> int: ...

    def count(self, messages: Sequence[ChatMessage]) -> int: ...

    def count_text(self, text: str) -> int: ...  # tokens of plain text, no template


def engine_mode() -> str:
    mode = settings.QASSIST_ENGINE
    if mode == "auto":
        return "redis" if settings.REDIS_URL else "embedded"
    return mode


def default_model() -> str:
    """The model a request naming none gets: QASSIST_MODEL, by the name it is given there."""
    return str(settings.QASSIST_MODEL)


def cpu_budget_on() -> bool:
    """Whether engines take turns for the host's cores (QASSIST_CPU_BUDGET): "auto" is on when
    this deployment is configured with more than one model, whose engines would share them."""
    mode = str(settings.QASSIST_CPU_BUDGET).strip().lower()
    if mode == "auto":
        return len(dict.fromkeys([default_model(), *settings.QASSIST_MODELS])) > 1
    return mode in ("on", "1", "true", "yes")


_host_turns: HostTurns | None = None
# A lock of its own: engine_turn() is called while _lock is held (get_engine_client ->
# _make_client), and threading.Lock is not reentrant.
_turns_lock = threading.Lock()


def engine_turn() -> Turn | None:
    """A seat at the host's compute turn for one engine of this process, or None when the CPU
    budget is off. Engines of this process share one ticket lock; the lock files in
    QASSIST_CPU_BUDGET_DIR extend it to the engines of other processes on the host."""
    global _host_turns
    if not cpu_budget_on():
        return None
    with _turns_lock:
        if _host_turns is None:
            folder = str(settings.QASSIST_CPU_BUDGET_DIR)
            _host_turns = HostTurns(Path(folder) if folder else None)
        return _host_turns.seat()


def build_engine(model: str | None = None) -> Engine:
    """Load `model` (a registry name or a .gguf path; None: QASSIST_MODEL) into a llama.cpp
    context (seconds) and wrap it in an engine.
    Call it on the thread that will step the engine: it lowers that thread's CPU priority
    (`QASSIST_ENGINE_NICE`), and llama.cpp's compute threads, started from it, inherit it."""
    from inference.runner import LlamaRunner  # imports llama_cpp: only where a model runs

    model_path = _model_path(model)  # a missing or unknown model fails before anything else
    lower_thread_priority(settings.QASSIST_ENGINE_NICE)

    runner = LlamaRunner(
        model_path,
        n_seq_max=settings.QASSIST_PARALLEL,
        n_ctx=settings.QASSIST_CONTEXT_SIZE,
        max_batch_tokens=settings.QASSIST_BATCH_TOKENS,
        n_threads=settings.QASSIST_THREADS,
        max_seq_tokens=settings.QASSIST_MAX_SEQ_TOKENS,
        disk_store=_disk_store(model_path),
        kv_unified=settings.QASSIST_KV_UNIFIED,
        grammar_step_seconds=settings.QASSIST_GRAMMAR_STEP_SECONDS,
        span_store=_span_store(model_path) if settings.QASSIST_PASSAGE_KV else None,
    )
    find, source = _passage_hooks or (None, None)
    return Engine(
        runner,
        max_batch_tokens=settings.QASSIST_BATCH_TOKENS,
        max_queue=settings.QASSIST_MAX_QUEUE,
        policy=settings.QASSIST_QUEUE_POLICY,
        aging=settings.QASSIST_QUEUE_AGING_SECONDS,
        max_wait=settings.QASSIST_MAX_WAIT_SECONDS,
        min_stream_speed=settings.QASSIST_MIN_STREAM_SPEED,
        hard_min_stream_speed=settings.QASSIST_MIN_STREAM_SPEED_HARD,
        ttft_target=settings.QASSIST_TTFT_TARGET_SECONDS,
        host_cache_bytes=settings.QASSIST_HOST_CACHE_MB * 1024 * 1024,
        host_disk_bytes=settings.QASSIST_HOST_CACHE_DISK_MB * 1024 * 1024,
        park_idle_steps=settings.QASSIST_PARK_IDLE_STEPS,
        compact_kv=settings.QASSIST_KV_COMPACT,
        max_prefill_backlog=settings.QASSIST_PREFILL_BACKLOG or None,
        passage_kv=settings.QASSIST_PASSAGE_KV,
        passage_cache_bytes=settings.QASSIST_PASSAGE_KV_MB * 1024 * 1024,
        passage_disk_bytes=settings.QASSIST_PASSAGE_KV_DISK_MB * 1024 * 1024,
        passage_recompute=settings.QASSIST_PASSAGE_KV_RECOMPUTE,
        find_passages=find,
        passage_source=source,
    )


def _disk_store(model_path: Path) -> Any:
    """The host cache's disk tier (`QASSIST_HOST_CACHE_DISK_MB`), or None when it is off or
    its folder cannot be used (then saved conversations beyond memory are recomputed)."""
    if settings.QASSIST_HOST_CACHE_MB <= 0 or settings.QASSIST_HOST_CACHE_DISK_MB <= 0:
        return None
    from inference.kvdisk import DiskKvStore

    try:
        return DiskKvStore(Path(settings.QASSIST_HOST_CACHE_DIR), _fingerprint(model_path))
    except OSError as exc:
        logger.warning("saved conversations stay in memory only: %s", exc)
        return None


def _span_store(model_path: Path) -> Any:
    """Passages' precomputed KV on disk (`QASSIST_PASSAGE_KV_DISK_MB`), in a folder of its own
    (each store removes what it does not recognise in its folder), or None."""
    if settings.QASSIST_PASSAGE_KV_DISK_MB <= 0:
        return None
    from inference.kvdisk import DiskKvStore

    try:
        return DiskKvStore(Path(settings.QASSIST_PASSAGE_KV_DIR), _fingerprint(model_path))
    except OSError as exc:
        logger.warning("passages' KV stays in memory only: %s", exc)
        return None


def _fingerprint(model_path: Path) -> str:
    import llama_cpp

    from inference.kvdisk import model_fingerprint

    digest = modelstore.read_verified_digest(model_path)
    if digest is None:
        digest = modelstore.hash_file(model_path, progress=False)
        modelstore.write_verified_digest(model_path, digest)
    # The state format depends on the llama.cpp build and the KV layout: f16, in one pool or
    # in a stream per sequence (a state blob records how many streams the context has).
    layout = (
        "f16/unified" if settings.QASSIST_KV_UNIFIED else f"f16/streams-{settings.QASSIST_PARALLEL}"
    )
    return model_fingerprint(digest, llama_cpp.__version__, layout)


def lower_thread_priority(by: int) -> None:
    """Raise the calling thread's nice value by `by` (on Linux, priority is per thread: the web
    threads of an embedded process keep theirs). Never needs a privilege; a no-op elsewhere."""
    if by <= 0 or not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + by))
    except OSError as exc:
        logger.warning("could not lower the engine's CPU priority: %s", exc)


def _model_path(model: str | None = None) -> Path:
    name = model or default_model()
    path = modelstore.resolve_model_path(name, settings.QASSIST_MODELS_DIR)
    if not path.is_file():
        raise FileNotFoundError(
            f"model file {path} is missing: run `python manage.py fetch_model {name}`"
        )
    return path


_client: EngineClient | None = None
_lock = threading.Lock()


def get_engine_client() -> EngineClient:
    global _client
    with _lock:
        if _client is None:
            _client = _make_client()
        return _client


def started_engine_client() -> EngineClient | None:
    """The process's engine client without starting an engine: the one made already, or (in
    Redis mode, where making one loads no model) a new one. None in embedded mode before the
    engine was started: a status page must never be what loads the model."""
    with _lock:
        client = _client
    if client is None and engine_mode() == "redis":
        return get_engine_client()
    return client


def set_engine_client(client: EngineClient | None) -> None:
    """Swap the process's client (tests use a fake runner behind a local client)."""
    global _client
    with _lock:
        _client = client


def _make_client() -> EngineClient:
    if engine_mode() == "redis":
        from inference.transport import RedisEngineClient

        metrics.use_redis(settings.REDIS_URL, settings.QASSIST_REDIS_PREFIX)
        return RedisEngineClient(
            settings.REDIS_URL,
            prefix=settings.QASSIST_REDIS_PREFIX,
            max_queue=settings.QASSIST_MAX_QUEUE,
            heartbeat_timeout=settings.QASSIST_WORKER_HEARTBEAT_SECONDS,
            max_wait=settings.QASSIST_MAX_WAIT_SECONDS,
            aging=settings.QASSIST_QUEUE_AGING_SECONDS,
            default_model=default_model(),
        )
    from inference.local import LocalEngineClient, RoutedEngineClient

    def local(model: str) -> LocalEngineClient:
        return LocalEngineClient(
            functools.partial(build_engine, model),
            stall_after=settings.QASSIST_ENGINE_STALL_SECONDS,
            model=model,
            turn=engine_turn(),
        )

    models = list(dict.fromkeys([default_model(), *settings.QASSIST_MODELS]))
    if len(models) == 1:
        client = local(models[0])
        client.start()
        return client
    routed = RoutedEngineClient({m: local(m) for m in models}, default_model())
    routed.start()
    return routed


# --- the tokenizer of the web process ---------------------------------------------------------


class _ModelCounter:
    def __init__(self, model: str | None = None) -> None:
        from inference.runner import LlamaTokenizer  # imports llama_cpp

        self.tokenizer = LlamaTokenizer.from_file(_model_path(model))
        self.max_seq_tokens = min(
            settings.QASSIST_MAX_SEQ_TOKENS,
            settings.QASSIST_CONTEXT_SIZE,
            self.tokenizer.n_ctx_train,
        )
        self._lock = threading.Lock()

    def count(self, messages: Sequence[ChatMessage]) -> int:
        with self._lock:  # one tokenizer, callers on several threads
            return self.tokenizer.count(messages)

    def count_text(self, text: str) -> int:
        with self._lock:
            return len(self.tokenizer.tokenize(text, special=False))


_counter: PromptCounter | None = None
_model_counters: dict[str, PromptCounter] = {}


def get_prompt_counter(model: str = "") -> PromptCounter:
    """The model's vocabulary, loaded alone (no weights) the first time it is needed. Each
    model counts with its own ("" and the default model share the default's counter)."""
    global _counter
    with _lock:
        if not model or model == default_model():
            if _counter is None:
                _counter = _ModelCounter()
            return _counter
        if model not in _model_counters:
            _model_counters[model] = _ModelCounter(model)
        return _model_counters[model]


def preload_prompt_counter() -> None:
    """Load the vocabulary now (at the web process's start). A missing model file is not fatal
    here: admission refuses clearly until it is installed."""
    try:
        get_prompt_counter()
    except FileNotFoundError as exc:
        logger.warning("the model's vocabulary is not loaded: %s", exc)


def set_prompt_counter(counter: PromptCounter | None, model: str = "") -> None:
    """Swap the process's counter (tests count with the fake runner's tokenizer); with
    `model`, that model's counter only."""
    global _counter
    with _lock:
        if model:
            if counter is None:
                _model_counters.pop(model, None)
            else:
                _model_counters[model] = counter
        else:
            _counter = counter
            _model_counters.clear()
