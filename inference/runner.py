"""The only module that touches llama.cpp: one context, one batch per step, per-sequence sampling.

Everything else in `inference/` is pure Python and is driven in tests by a fake runner with the
same surface (see `inference.engine.Runner`).
"""

from __future__ import annotations

import copy
import ctypes
import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_grammar
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from inference import kvblob
from inference.kvdisk import DiskKvStore
from inference.scheduler import (
    CompactKv,
    DecodeItem,
    DropSaved,
    DropSpan,
    KvOp,
    PlaceSpan,
    PrefillChunk,
    RestoreKv,
    SaveKv,
    SaveSpan,
    SchedulerOutput,
    ShareKv,
    SpillSaved,
    SpillSpan,
)
from inference.types import (
    NO_ENTRY,
    ChatMessage,
    Constraint,
    KvPoolLost,
    PromptPart,
    Request,
    RestoreFailed,
    TokenLogprobs,
    prompt_text,
)

logger = logging.getLogger("inference.llama")

# llama.cpp keeps a raw pointer to the log callback: it must live as long as the process.
_LOG_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_log_callback: Any = None

# ChatML, for a GGUF that carries no template of its own.
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# Stand-ins for message contents while the template renders: private-use characters.
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"
_MARK_RE = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")

REPEAT_LAST_N = 64  # generated tokens the repetition penalty looks back on

SHORTLIST = 64  # a grammar-rejected token is sampled again among this many likeliest first
# Candidates the grammar checks in one call over the whole vocabulary: between two calls a
# request past its grammar's time budget stops (one call cannot be interrupted).
GRAMMAR_SLICE = 8_192
_OVER_BUDGET = -2  # _resample's answer when the grammar ran out of time

# llama_token_data as numpy lays it out: a whole vocabulary of candidates filled by slices.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class RunnerError(RuntimeError):
    pass


MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ
ROPE_NORM, ROPE_NEOX = 0, 2  # llama_rope_type


def model_rope(model: Any, meta: Any) -> kvblob.Rope | None:
    """How the model rotates its keys by position, when `inference.kvblob` can move them: RoPE
    in the "norm" (Llama, SmolLM2) or "neox" (Qwen2) layout without YaRN or long-RoPE scaling
    and without sliding-window attention. None otherwise: passages are then computed in place."""
    rope_type = int(llama_cpp.llama_model_rope_type(model))
    arch = meta("general.architecture")
    scaling = meta(f"{arch}.rope.scaling.type")
    if rope_type not in (ROPE_NORM, ROPE_NEOX) or scaling not in ("", "none", "linear"):
        return None
    if meta(f"{arch}.attention.sliding_window"):
        return None
    n_head = max(1, int(llama_cpp.llama_model_n_head(model)))
    head_dim = int(meta(f"{arch}.attention.key_length") or 0) or (
        int(llama_cpp.llama_model_n_embd(model)) // n_head
    )
    return kvblob.Rope(
        n_rot=int(meta(f"{arch}.rope.dimension_count") or 0) or head_dim,
        head_dim=head_dim,
        n_head_kv=int(llama_cpp.llama_model_n_head_kv(model)),
        freq_base=float(meta(f"{arch}.rope.freq_base") or 10000.0),
        freq_scale=float(llama_cpp.llama_model_rope_freq_scale_train(model)),
        neox=rope_type == ROPE_NEOX,
    )


def install_log_callback() -> None:
    """Send llama.cpp's logging to Python's (debug-level chatter stays at DEBUG)."""
    global _log_callback
    if _log_callback is not None:
        return

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def _callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            logger.log(_LOG_LEVELS.get(level, logging.DEBUG), "%s", message)

    _log_callback = _callback
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def system_info() -> str:
    return str(llama_cpp.llama_print_system_info().decode("utf-8", errors="replace"))


# --- structured output: JSON Schemas as llama.cpp grammars ---------------------------------------

MAX_REPEATS = 8  # parallel tool calls in one reply

# The converter llama-cpp-python ships (a port of llama.cpp's json-schema-to-grammar), untyped.
_SchemaConverter: Any = llama_grammar.SchemaConverter
# A character of a JSON string as llama.cpp's own converter has it since: the port's rule lets
# raw control characters (a newline) into strings, which JSON parsers refuse.
JSON_CHAR = (
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] '
    r"[0-9a-fA-F])"
)


def constraint_grammar(
    schema: dict[str, Any] | None, *, prefix: str = "", suffix: str = "", repeat: bool = False
) -> str:
    """GBNF for `prefix`, then a JSON value following `schema` (already checked by
    `inference.constraints.check_schema`; None: any JSON object), then `suffix`; with `repeat`,
    one to `MAX_REPEATS` of those joined by newlines (a bound, so that a model repeating itself
    still ends). Whitespace between JSON tokens is at most one
    space (the converter's rule), so a small model cannot run away in indentation."""
    converter = _SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    resolved = converter.resolve_refs(copy.deepcopy(schema or {"type": "object"}), "schema")
    body = str(converter.visit(resolved, "json"))
    block = " ".join(p for p in (_gbnf_literal(prefix), body, _gbnf_literal(suffix)) if p)
    more = f' ("\\n" {block}){{0,{MAX_REPEATS - 1}}}' if repeat else ""
    converter._add_rule("root", block + more)
    if "char" in converter._rules:
        converter._rules["char"] = JSON_CHAR
    return str(converter.format_grammar())


def _ref(cur: Any) -> Any:
    """A pointer to candidates for llama_sampler_apply (the bindings type it as an array)."""
    return ctypes.byref(cur)


def _gbnf_literal(text: str) -> str:
    if not text:
        return ""
    for char, escape in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
        text = text.replace(char, escape)
    return f'"{text}"'


@dataclass
class _Constrained:
    """A constrained request's samplers: its grammar and (unless greedy) its sampling chain,
    freed together when it ends. The grammar text is kept with them: llama.cpp copies it, but
    nothing handed to it is left for Python to collect while it may still be read."""

    grammar: Any
    chain: Any
    text: bytes


class LlamaTokenizer:
    """A model's chat template and tokenizer. Built on a loaded model, or alone from the GGUF
    file with `vocab_only` (no weights: a web process counts prompt tokens with it in a
    fraction of a second and a few megabytes)."""

    def __init__(self, model: Any, *, owns_model: bool = False) -> None:
        self.model = model
        self._owns_model = owns_model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        # A vocab-only load leaves the hyperparameters unread (0): take the metadata's value.
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(model)) or self._meta_int(
            "{arch}.context_length"
        )
        self._pieces: dict[int, bytes] = {}
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self._bos_text = self._token_text(llama_cpp.llama_vocab_bos(self.vocab))
        raw = llama_cpp.llama_model_chat_template(model, None)
        self._formatter = Jinja2ChatFormatter(
            template=raw.decode("utf-8") if raw else _CHATML,
            eos_token=self._token_text(llama_cpp.llama_vocab_eos(self.vocab)),
            bos_token=self._bos_text,
        )

    @classmethod
    def from_file(cls, model_path: Path) -> LlamaTokenizer:
        install_log_callback()
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not model:
            raise RunnerError(f"llama.cpp could not load the vocabulary of {model_path}")
        return cls(model, owns_model=True)

    def meta(self, key: str) -> str:
        """A GGUF metadata value as text ("" when the model has none)."""
        return self._meta(key)

    def _meta(self, key: str) -> str:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else ""

    def _meta_int(self, key: str) -> int:
        value = self._meta(key.format(arch=self._meta("general.architecture")))
        return int(value) if value.isdigit() else 0

    def close(self) -> None:
        if self._owns_model and self.model:
            llama_cpp.llama_model_free(self.model)
        self.model = None

    # --- prompts -----------------------------------------------------------------------------

    def render_prompt(self, messages: Sequence[ChatMessage]) -> list[PromptPart]:
        """The model's own chat template applied, ready for the assistant's turn, as parts:
        the template's text (trusted) between the messages' contents (never trusted).

        The template is rendered with a marker in place of each content, then the contents are
        put back as parts of their own, so nothing a message says can become a control token.
        """
        chat: Any = [
            {"role": m.role, "content": f"{_MARK_OPEN}{i}{_MARK_CLOSE}"}
            for i, m in enumerate(messages)
        ]
        rendered = str(self._formatter(messages=chat).prompt)
        pieces = _MARK_RE.split(rendered)
        # split() alternates text, index, text, ...: every content must appear once, in order.
        indexes = [int(i) for i in pieces[1::2]]
        if indexes != list(range(len(messages))):
            raise ValueError("the model's chat template does not keep message contents intact")
        parts: list[PromptPart] = []
        for i, text in enumerate(pieces):
            if i % 2 == 0:
                if text:
                    parts.append(PromptPart(text, trusted=True))
            elif content := messages[int(text)].content:
                parts.append(PromptPart(content, trusted=False))
        return parts

    def tokenize_parts(
        self, parts: Sequence[PromptPart], *, continuation: bool = False
    ) -> list[int]:
        """Tokens of a prompt's parts. A BOS is added where the model wants one, unless the
        parts continue tokens already in a sequence or the template wrote it itself."""
        text = prompt_text(parts)
        bos = (
            not continuation
            and self._add_bos
            and not (self._bos_text and text.startswith(self._bos_text))
        )
        tokens: list[int] = []
        for part in parts:
            tokens += self.tokenize(part.text, special=part.trusted, add_bos=bos)
            bos = False
        return tokens

    def count(self, messages: Sequence[ChatMessage]) -> int:
        """How many tokens the conversation takes as a prompt."""
        return len(self.tokenize_parts(self.render_prompt(messages)))

    def tokenize(self, text: str, *, special: bool, add_bos: bool = False) -> list[int]:
        if not text and not add_bos:
            return []
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, size, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    # --- tokens to text ------------------------------------------------------------------------

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece(token, special=True).decode("utf-8", errors="replace")

    def _piece(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return bytes(buf.raw[:n])

    def token_bytes(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token, special=False)
        return piece

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))


class LlamaRunner:
    def __init__(
        self,
        model_path: Path,
        *,
        n_seq_max: int,
        n_ctx: int,
        max_batch_tokens: int,
        n_threads: int,
        max_seq_tokens: int,
        disk_store: DiskKvStore | None = None,
        kv_unified: bool = True,
        grammar_step_seconds: float = 0.0,
        span_store: DiskKvStore | None = None,
    ) -> None:
        install_log_callback()
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self.model:
            raise RunnerError(f"llama.cpp could not load the model at {model_path}")
        # How long one request's grammar may take in one step (0: unbounded); the engine ends a
        # request over it (`last_grammar_seconds`), and sampling stops short of it here.
        self.grammar_step_seconds = grammar_step_seconds
        self.last_grammar_seconds: dict[str, float] = {}
        self.tokenizer = LlamaTokenizer(self.model)
        self.n_vocab = self.tokenizer.n_vocab

        # Where sequences keep their KV (docs/engine.md, "KV memory"). Unified (the default):
        # one pool of `n_ctx` cells shared by all, where a shared prefix is one set of cells and
        # a step's prompts go in one pass, but every token's attention visits every cell in
        # use, other sequences' too (masked). Per sequence: each has its own stream of
        # `max_seq_tokens` cells and a token visits only those, but llama.cpp computes a
        # step's tokens in one pass per run of consecutive sequences with as many tokens each.
        self.kv_unified = kv_unified
        if not kv_unified:
            n_ctx = n_seq_max * min(max_seq_tokens, self.tokenizer.n_ctx_train)
        # A passage's precomputed KV is placed through a scratch sequence of its own (the last
        # one; the engine never uses it): read into it, then its cells shared with the target
        # (`_place`). In the unified pool only: a stream per sequence does without.
        self._rope = model_rope(self.model, self.tokenizer.meta)
        self._scratch = n_seq_max if kv_unified and n_seq_max < MAX_SEQUENCES else None
        self.passage_kv = self._rope is not None and (not kv_unified or self._scratch is not None)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = max_batch_tokens
        cparams.n_ubatch = max_batch_tokens
        cparams.n_seq_max = n_seq_max + (1 if self._scratch is not None else 0)
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.kv_unified = kv_unified
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RunnerError("llama.cpp could not create the context (out of memory?)")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self.ctx))
        seq_cells = self.n_ctx if kv_unified else int(llama_cpp.llama_n_ctx_seq(self.ctx))
        self.max_seq_tokens = min(max_seq_tokens, seq_cells, self.tokenizer.n_ctx_train)
        self.n_seq_max = n_seq_max
        self._capacity = max_batch_tokens
        self._init_batch(max_batch_tokens)

        # KV of one token: keys and values (f16) of every layer, plus the state's cell header.
        n_head = max(1, int(llama_cpp.llama_model_n_head(self.model)))
        head_dim = int(llama_cpp.llama_model_n_embd(self.model)) // n_head
        kv_width = head_dim * int(llama_cpp.llama_model_n_head_kv(self.model))
        self.kv_bytes_per_token = int(llama_cpp.llama_model_n_layer(self.model)) * 2 * kv_width * 2
        self.kv_bytes_per_token += 12
        self.n_layer = int(llama_cpp.llama_model_n_layer(self.model))
        self._saved: dict[int, np.ndarray[Any, np.dtype[np.uint8]]] = {}
        self._disk = disk_store  # saved sequences spilled beyond host memory, or None
        self._spans: dict[int, np.ndarray[Any, np.dtype[np.uint8]]] = {}  # passages' KV
        self._span_disk = span_store  # passages' KV beyond host memory, or None

        self._samplers: dict[str, Any] = {}
        self._constrained: dict[str, _Constrained] = {}
        # Candidates for sampling under a grammar: a whole vocabulary, refilled each time (the
        # samplers sort it in place), and one candidate to check a single token.
        self._ids = np.arange(self.n_vocab, dtype=np.int32)
        self._candidates = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        self._short = np.zeros(min(SHORTLIST, self.n_vocab), dtype=_TOKEN_DATA)
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self.grammar_tokens = 0  # tokens sampled under a grammar
        self.grammar_resamples = 0  # of those, rejected at first and sampled again under it
        self.last_logprobs: dict[str, TokenLogprobs] = {}
        self.last_decode_seconds = 0.0

    # --- the model's text side, for the engine --------------------------------------------------

    def render_prompt(self, messages: Sequence[ChatMessage]) -> list[PromptPart]:
        return self.tokenizer.render_prompt(messages)

    def tokenize_parts(
        self, parts: Sequence[PromptPart], *, continuation: bool = False
    ) -> list[int]:
        return self.tokenizer.tokenize_parts(parts, continuation=continuation)

    def token_bytes(self, token: int) -> bytes:
        return self.tokenizer.token_bytes(token)

    def is_eog(self, token: int) -> bool:
        return self.tokenizer.is_eog(token)

    def check_constraint(self, constraint: Constraint) -> None:
        """ValueError when llama.cpp cannot parse the constraint's grammar."""
        sampler = self._grammar_sampler(constraint.grammar.encode("utf-8"))
        llama_cpp.llama_sampler_free(sampler)

    def _grammar_sampler(self, grammar: bytes) -> Any:
        sampler = llama_cpp.llama_sampler_init_grammar(self.tokenizer.vocab, grammar, b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar")
        return sampler

    # --- batch memory, owned by numpy so a step fills it with slices, not per-token ctypes ---

    def _init_batch(self, capacity: int) -> None:
        self._tokens = np.zeros(capacity, dtype=np.int32)
        self._pos = np.zeros(capacity, dtype=np.int32)
        self._n_seq = np.ones(capacity, dtype=np.int32)
        self._seq = np.zeros(capacity, dtype=np.int32)
        self._logits = np.zeros(capacity, dtype=np.int8)
        base = self._seq.ctypes.data
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * capacity)(
            *[ctypes.cast(base + 4 * i, ctypes.POINTER(ctypes.c_int32)) for i in range(capacity)]
        )
        # Any: the bindings type these fields as arrays; llama.cpp takes plain pointers.
        batch: Any = llama_cpp.llama_batch()
        batch.token = self._tokens.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.embd = ctypes.cast(0, ctypes.POINTER(ctypes.c_float))
        batch.pos = self._pos.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.n_seq_id = self._n_seq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)))
        batch.logits = self._logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self._batch = batch

    # --- one step ---------------------------------------------------------------------------

    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        """Apply KV moves, decode one batch, sample a next token for each request that needs one."""
        failed: list[tuple[int, int]] = []
        for action in out.kv_ops:
            if isinstance(action, SaveKv):
                self._save(action)
            elif isinstance(action, RestoreKv):
                if not self._restore(action):
                    failed.append((action.seq_id, action.entry))
            elif isinstance(action, SpillSaved):
                self._spill(action)
            elif isinstance(action, CompactKv):
                self._compact()
            elif isinstance(action, ShareKv):
                llama_cpp.llama_memory_seq_rm(self.memory, action.seq_id, 0, action.n_tokens)
                llama_cpp.llama_memory_seq_cp(
                    self.memory, action.source, action.seq_id, 0, action.n_tokens
                )
            elif isinstance(action, DropSaved):
                self._saved.pop(action.entry, None)
                if self._disk is not None:
                    self._disk.drop(action.entry)
            elif isinstance(action, SaveSpan):
                self._save_span(action)
            elif isinstance(action, PlaceSpan):
                if not self._place(action, lost={seq for seq, _ in failed}):
                    failed.append((action.seq_id, action.entry))
            elif isinstance(action, SpillSpan):
                self._spill_span(action)
            elif isinstance(action, DropSpan):
                self._spans.pop(action.entry, None)
                if self._span_disk is not None:
                    self._span_disk.drop(action.entry)
            elif not self._kv_op(action, lost={seq for seq, _ in failed}):
                failed.append((action.seq_id, NO_ENTRY))
        if failed:
            raise RestoreFailed(failed)  # before the batch: it would decode on missing KV
        if out.is_empty:
            return {}

        n = 0
        samples: list[tuple[Request, int]] = []
        # In sequence order, decodes and prompt chunks together: with a stream per sequence,
        # llama.cpp computes a run of consecutive sequence ids in one pass, taking them in the
        # order the batch lists them.
        items: list[DecodeItem | PrefillChunk] = [*out.decodes, *out.prefills]
        for item in sorted(items, key=lambda item: item.seq_id):
            if isinstance(item, DecodeItem):
                self._tokens[n], self._pos[n], self._seq[n], self._logits[n] = (
                    item.token,
                    item.pos,
                    item.seq_id,
                    1,
                )
                samples.append((item.request, n))
                n += 1
                continue
            k = len(item.tokens)
            self._tokens[n : n + k] = item.tokens
            self._pos[n : n + k] = np.arange(item.start, item.start + k, dtype=np.int32)
            self._seq[n : n + k] = item.seq_id
            self._logits[n : n + k] = 0
            if item.wants_logits:
                self._logits[n + k - 1] = 1
                samples.append((item.request, n + k - 1))
            n += k
        if n > self._capacity:
            raise RunnerError(f"batch of {n} tokens exceeds the capacity {self._capacity}")
        self._batch.n_tokens = n

        started = time.perf_counter()
        status = llama_cpp.llama_decode(self.ctx, self._batch)
        self.last_decode_seconds = time.perf_counter() - started
        if status != 0:
            raise RunnerError(f"llama_decode failed with status {status}")
        self.last_logprobs = {}
        self.last_grammar_seconds = {}
        return {req.request_id: self._sample(req, idx) for req, idx in samples}

    def _kv_op(self, op: KvOp, lost: set[int]) -> bool:
        """Trim a sequence, then copy a prefix into it; False (the sequence left empty) when
        the copy failed or its source lost its KV earlier in this step (`lost`)."""
        llama_cpp.llama_memory_seq_rm(self.memory, op.seq_id, op.keep, -1)
        if op.copy_from is None or op.copy_len <= 0:
            return True
        if self.kv_unified and op.copy_from not in lost:  # shared cells: nothing is copied
            llama_cpp.llama_memory_seq_cp(self.memory, op.copy_from, op.seq_id, 0, op.copy_len)
            return True
        # Another stream: the source's KV is copied over (a few ms for a few hundred tokens),
        # then trimmed to the prefix. llama.cpp's own cross-stream copy would copy the whole
        # stream, and only at the next llama_decode.
        if op.copy_from not in lost:
            if self._load(self._state_of(op.copy_from), op.seq_id) >= op.copy_len:
                llama_cpp.llama_memory_seq_rm(self.memory, op.seq_id, op.copy_len, -1)
                return True
            llama_cpp.llama_memory_seq_rm(self.memory, op.seq_id, 0, -1)
        logger.warning("copying sequence %d into %d failed", op.copy_from, op.seq_id)
        return False

    def _state_of(self, seq_id: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """`seq_id`'s KV (-1: every sequence's) as a llama.cpp state blob, empty on failure."""
        size = int(llama_cpp.llama_state_seq_get_size(self.ctx, seq_id))
        blob = np.empty(size, dtype=np.uint8)
        ptr = blob.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        written = int(llama_cpp.llama_state_seq_get_data(self.ctx, ptr, size, seq_id))
        return blob[: max(written, 0)]

    def _load(self, blob: np.ndarray[Any, np.dtype[np.uint8]], seq_id: int) -> int:
        """Put a state blob into `seq_id`: the positions it holds then, 0 when llama.cpp did
        not read all of it (the caller clears the sequence when the count is not what it needs)."""
        ptr = blob.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        read = int(llama_cpp.llama_state_seq_set_data(self.ctx, ptr, blob.nbytes, seq_id))
        if blob.nbytes == 0 or read != blob.nbytes:
            return 0
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq_id)) + 1

    def _compact(self) -> None:
        """Pack every sequence's cells from the pool's start: the whole KV (cells shared by
        several sequences stay shared) is written out and read back, and llama.cpp's whole-pool
        read places the cells contiguously from cell 0."""
        started = time.perf_counter()
        blob = self._state_of(-1)
        written = blob.nbytes
        if written <= 0:
            logger.warning("packing the KV pool: saving it failed; left as it was")
            return
        ptr = blob.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        read = int(llama_cpp.llama_state_seq_set_data(self.ctx, ptr, written, -1))
        if read != written:
            # The pool was cleared before the read: what the sequences held is gone.
            llama_cpp.llama_memory_clear(self.memory, True)
            raise KvPoolLost(f"packing the KV pool failed (read {read} of {written} bytes)")
        logger.debug(
            "packed the KV pool: %.0f MB in %.0f ms",
            written / 1e6,
            1000 * (time.perf_counter() - started),
        )

    # --- host memory: whole sequences saved and restored as llama.cpp state blobs -------------

    @property
    def saved_bytes(self) -> int:
        return sum(int(blob.nbytes) for blob in self._saved.values())

    def _save(self, op: SaveKv) -> None:
        blob = self._state_of(op.seq_id)
        if not blob.nbytes:
            logger.warning("saving sequence %d to host memory failed", op.seq_id)
            return  # a restore of this entry fails clearly instead of reading garbage
        self._saved[op.entry] = blob

    @property
    def disk_bytes(self) -> int:
        return self._disk.used_bytes if self._disk is not None else 0

    def _spill(self, op: SpillSaved) -> None:
        blob = self._saved.pop(op.entry, None)
        if blob is not None and self._disk is not None:
            # On failure (disk full) the entry is simply gone: its restore fails, and the
            # request recomputes its prompt.
            self._disk.write(op.entry, op.tenant, list(op.tokens), blob)

    def disk_entries(self) -> list[tuple[str, list[int], str]]:
        return self._disk.scan() if self._disk is not None else []

    def bind_disk_entry(self, key: str, entry: int | None) -> None:
        if self._disk is not None:
            self._disk.bind(key, entry)

    def _restore(self, op: RestoreKv) -> bool:
        """Put host entry `op.entry` into `op.seq_id`; False (the sequence left empty) when it is
        missing, its file does not check out, or llama.cpp refuses the state."""
        blob = self._saved.get(op.entry)
        if blob is None and self._disk is not None:
            blob = self._disk.read(op.entry)
        if blob is None:
            logger.warning("host entry %d is not available", op.entry)
            return False
        if self._load(blob, op.seq_id) != op.n_tokens:
            llama_cpp.llama_memory_seq_rm(self.memory, op.seq_id, 0, -1)
            logger.warning(
                "restoring host entry %d (%d tokens) into sequence %d failed",
                op.entry,
                op.n_tokens,
                op.seq_id,
            )
            return False
        return True

    # --- passages' KV computed once, placed where prompts carry them (inference.passages) ------

    @property
    def span_bytes(self) -> int:
        return sum(int(blob.nbytes) for blob in self._spans.values())

    @property
    def span_disk_bytes(self) -> int:
        return self._span_disk.used_bytes if self._span_disk is not None else 0

    def span_files(self) -> list[tuple[str, str, list[int], int, str]]:
        if self._span_disk is None:
            return []
        found = []
        for tenant, tokens, meta, name in self._span_disk.scan_meta():
            key, start = meta.get("key"), meta.get("start")
            if isinstance(key, str) and isinstance(start, int):
                found.append((tenant, key, tokens, start, name))
            else:
                self._span_disk.bind(name, None)
        return found

    def bind_span_file(self, name: str, entry: int | None) -> None:
        if self._span_disk is not None:
            self._span_disk.bind(name, entry)

    def _save_span(self, op: SaveSpan) -> None:
        """Keep the cells of a passage just computed after its anchor (nothing else of the
        sequence): a placement of a missing entry fails clearly and the prompt is computed."""
        try:
            cells = kvblob.parse(self._state_of(op.seq_id), n_layer=self.n_layer)
            self._spans[op.entry] = cells.span(op.start, op.start + op.n_tokens).to_blob()
        except kvblob.BlobError as exc:
            logger.warning("keeping a passage's KV from sequence %d failed: %s", op.seq_id, exc)

    def _spill_span(self, op: SpillSpan) -> None:
        blob = self._spans.pop(op.entry, None)
        if blob is not None and self._span_disk is not None:
            meta = {"key": op.key, "start": op.start}
            self._span_disk.write(op.entry, op.tenant, list(op.tokens), blob, meta)

    def _place(self, op: PlaceSpan, lost: set[int]) -> bool:
        """Put a passage's kept cells into `op.seq_id` at `op.at`, keys rotated by the distance
        (`inference.kvblob`). In the unified pool they are read into the scratch sequence and
        shared with the target (`llama_memory_seq_cp` adds the target to those cells: nothing is
        copied), then the scratch lets go of them; with a stream per sequence the target's own
        cells and the passage's are read back together. False (nothing placed) when the entry
        is gone or damaged, or the target does not end right before `op.at`."""
        if op.seq_id in lost or self._rope is None:
            return False
        blob = self._spans.get(op.entry)
        if blob is None and self._span_disk is not None:
            blob = self._span_disk.read(op.entry)
        held = int(llama_cpp.llama_memory_seq_pos_max(self.memory, op.seq_id)) + 1
        if blob is None or held != op.at:
            logger.warning(
                "passage entry %d cannot go into sequence %d at %d (it holds %d positions)",
                op.entry,
                op.seq_id,
                op.at,
                held,
            )
            return False
        end = op.at + op.n_tokens
        try:
            cells = kvblob.parse(blob, n_layer=self.n_layer)
            first = int(cells.positions.min()) + op.offset
            part = cells.span(first, first + op.n_tokens).moved(op.at, self._rope)
            if self._scratch is None:  # a stream per sequence
                own = kvblob.parse(self._state_of(op.seq_id), n_layer=self.n_layer)
                part = kvblob.concat(own, part)
        except kvblob.BlobError as exc:
            logger.warning("passage entry %d cannot be placed: %s", op.entry, exc)
            return False
        target = op.seq_id if self._scratch is None else self._scratch
        if self._load(part.to_blob(), target) != end:
            llama_cpp.llama_memory_seq_rm(self.memory, target, 0, -1)
            logger.warning("placing passage entry %d into sequence %d failed", op.entry, op.seq_id)
            return False
        if self._scratch is not None:
            llama_cpp.llama_memory_seq_cp(self.memory, self._scratch, op.seq_id, -1, -1)
            llama_cpp.llama_memory_seq_rm(self.memory, self._scratch, -1, -1)
        return True

    def _sample(self, req: Request, idx: int) -> int:
        if req.params.constraint is not None:
            token = self._sample_constrained(req, idx)
        elif req.params.greedy:
            token = int(self._row_logits(idx).argmax())
        else:
            sampler = self._samplers.get(req.request_id)
            if sampler is None:
                sampler = self._samplers[req.request_id] = self._make_sampler(req)
            token = int(llama_cpp.llama_sampler_sample(sampler, self.ctx, idx))
        if req.params.logprobs is not None:
            self.last_logprobs[req.request_id] = self._logprobs(idx, token, req.params.logprobs)
        return token

    def _row_logits(self, idx: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, idx)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _logprobs(self, idx: int, token: int, top: int) -> TokenLogprobs:
        """The token's log-probability under the model's own distribution (before temperature,
        penalties or a grammar), and the `top` most likely tokens with theirs."""
        logits = self._row_logits(idx)
        peak = float(logits.max())
        total = peak + math.log(float(np.exp(logits.astype(np.float64) - peak).sum()))
        best: tuple[tuple[int, float], ...] = ()
        if top > 0:
            ids = np.argpartition(logits, -top)[-top:]
            ids = ids[np.argsort(-logits[ids], kind="stable")]
            best = tuple((int(i), float(logits[i]) - total) for i in ids)
        return TokenLogprobs(float(logits[token]) - total, best)

    def _sample_constrained(self, req: Request, idx: int) -> int:
        """A token the request's grammar allows. As llama.cpp's own common sampler does, the
        token is first sampled freely and only checked against the grammar (one candidate);
        only when the grammar rejects it is it sampled again from what the grammar allows
        (`_resample`: the 64 likeliest tokens first, the whole vocabulary — milliseconds on
        150,000 tokens — only when none of them is allowed)."""
        started = time.perf_counter()
        budget = self.grammar_step_seconds
        deadline = started + budget if budget > 0 else math.inf
        try:
            return self._constrained_token(req, idx, deadline)
        finally:
            self.last_grammar_seconds[req.request_id] = time.perf_counter() - started

    def _constrained_token(self, req: Request, idx: int, deadline: float) -> int:
        """`_sample_constrained`'s work. Once `deadline` has passed (a grammar whose every
        check costs more than the last: issue #32) no further grammar call is made: the end
        token comes back, and the engine ends the request for its `last_grammar_seconds`.
        One call already running in llama.cpp cannot be cut short; the worker's watchdog
        reports a step stuck in one."""
        eos = int(llama_cpp.llama_vocab_eos(self.tokenizer.vocab))
        state = self._constrained.get(req.request_id)
        if state is None:
            assert req.params.constraint is not None
            text = req.params.constraint.grammar.encode("utf-8")
            chain = None if req.params.greedy else self._make_sampler(req)
            state = _Constrained(self._grammar_sampler(text), chain, text)
            self._constrained[req.request_id] = state
        logits = self._row_logits(idx)
        token = int(logits.argmax()) if state.chain is None else self._apply(state.chain, logits)
        self.grammar_tokens += 1
        if not self._allows(state.grammar, token):
            self.grammar_resamples += 1
            if time.perf_counter() > deadline:
                return eos
            resampled = self._resample(
                state, logits, shortlist=self._shortlist_ok(req), deadline=deadline
            )
            if resampled == _OVER_BUDGET:
                return eos
            if resampled is None:
                # Nothing can follow (a grammar with a dead end): end the reply here rather
                # than hand llama.cpp a token its grammar would abort on.
                logger.warning("request %s: its grammar allows no token", req.request_id)
                return eos
            token = resampled
        if time.perf_counter() > deadline:
            return eos
        if not self.is_eog(token):
            # The end token ends the request: nothing is sampled after it.
            llama_cpp.llama_sampler_accept(state.grammar, token)
        if state.chain is not None:
            llama_cpp.llama_sampler_accept(state.chain, token)
        return token

    @staticmethod
    def _shortlist_ok(req: Request) -> bool:
        """Whether sampling again among the likeliest `SHORTLIST` tokens is sampling again
        among all: always for greedy (the best allowed token is among them unless none is),
        and when top-k keeps no more than that many anyway (then only tokens ranked beyond
        the shortlist, a tail of next to no probability, are left out when fewer than top-k
        of the shortlist are allowed)."""
        p = req.params
        return p.greedy or p.temperature <= 0.0 or 0 < p.top_k <= SHORTLIST

    def _resample(
        self,
        state: _Constrained,
        logits: np.ndarray[Any, np.dtype[np.float32]],
        *,
        shortlist: bool,
        deadline: float = math.inf,
    ) -> int | None:
        """A token the grammar allows, sampled again with the request's chain (or the best,
        when greedy): first among the `SHORTLIST` likeliest tokens (the grammar checks 64
        candidates, not 150,000), then, when it allows none of them, over the whole
        vocabulary, a slice at a time, so that a grammar past its `deadline` stops between
        slices (`_OVER_BUDGET`). None when the grammar allows nothing at all."""
        passes: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        if shortlist and len(logits) > SHORTLIST:
            ids = np.argpartition(logits, -SHORTLIST)[-SHORTLIST:]
            passes.append((self._short, ids))
        passes.append((self._candidates, self._ids))
        for cand, ids in passes:
            cur = self._fill(cand, ids, logits[ids] if cand is self._short else logits)
            if not self._apply_grammar(state.grammar, cand, deadline):
                return _OVER_BUDGET
            allowed = cand["logit"]
            if not np.isfinite(allowed.max()):
                continue
            if state.chain is None:
                return int(cand["id"][int(allowed.argmax())])
            llama_cpp.llama_sampler_apply(state.chain, _ref(cur))
            return int(cand["id"][cur.selected])
        return None

    @staticmethod
    def _apply_grammar(
        grammar: Any, cand: np.ndarray[Any, np.dtype[np.void]], deadline: float
    ) -> bool:
        """The grammar applied to `cand` in place (what it rejects gets -inf), `GRAMMAR_SLICE`
        candidates per call; False when `deadline` passed before the last slice."""
        data = cand.ctypes.data
        for start in range(0, len(cand), GRAMMAR_SLICE):
            if start and time.perf_counter() > deadline:
                return False
            size = min(GRAMMAR_SLICE, len(cand) - start)
            part = llama_cpp.llama_token_data_array(
                data=ctypes.cast(
                    data + start * cand.itemsize, ctypes.POINTER(llama_cpp.llama_token_data)
                ),
                size=size,
                selected=-1,
                sorted=False,
            )
            llama_cpp.llama_sampler_apply(grammar, _ref(part))
        return True

    def _fill(
        self,
        cand: np.ndarray[Any, np.dtype[np.void]],
        ids: np.ndarray[Any, np.dtype[np.int32]] | np.ndarray[Any, np.dtype[np.intp]],
        logits: np.ndarray[Any, np.dtype[np.float32]],
    ) -> Any:
        """Candidates for llama.cpp's samplers: `ids` with their raw logits."""
        cand["id"] = ids
        cand["logit"] = logits
        cand["p"] = 0.0
        return llama_cpp.llama_token_data_array(
            data=cand.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=len(cand),
            selected=-1,
            sorted=False,
        )

    def _apply(self, chain: Any, logits: np.ndarray[Any, np.dtype[np.float32]]) -> int:
        """Sample with `chain` over the raw logits without accepting the token (yet)."""
        cur = self._fill(self._candidates, self._ids, logits)
        llama_cpp.llama_sampler_apply(chain, _ref(cur))
        return int(self._candidates["id"][cur.selected])

    def _allows(self, grammar: Any, token: int) -> bool:
        one = self._one
        one["id"] = token
        one["logit"] = 1.0
        one["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=one.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=1,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(grammar, _ref(cur))
        return bool(np.isfinite(one["logit"][0]))

    def _make_sampler(self, req: Request) -> Any:
        p = req.params
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = llama_cpp.llama_sampler_chain_add

        def penalties() -> None:
            # This llama.cpp takes the vocabulary size first (its llama.h), as the bindings say.
            if p.repeat_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
                penalty = llama_cpp.llama_sampler_init_penalties(
                    self.n_vocab,
                    REPEAT_LAST_N,
                    p.repeat_penalty,
                    p.frequency_penalty,
                    p.presence_penalty,
                )
                add(chain, penalty)

        if p.temperature <= 0.0:
            penalties()
            add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        if p.top_k > 0:
            add(chain, llama_cpp.llama_sampler_init_top_k(p.top_k))
        penalties()  # after top-k: over the whole vocabulary it costs milliseconds a token
        add(chain, llama_cpp.llama_sampler_init_top_p(p.top_p, 1))
        add(chain, llama_cpp.llama_sampler_init_temp(p.temperature))
        seed = p.seed if p.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED
        add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def release(self, request: Request) -> None:
        sampler = self._samplers.pop(request.request_id, None)
        if sampler is not None:
            llama_cpp.llama_sampler_free(sampler)
        self.last_logprobs.pop(request.request_id, None)
        state = self._constrained.pop(request.request_id, None)
        if state is not None:
            self._free_constrained(state)

    @staticmethod
    def _free_constrained(state: _Constrained) -> None:
        llama_cpp.llama_sampler_free(state.grammar)
        if state.chain is not None:
            llama_cpp.llama_sampler_free(state.chain)

    def close(self) -> None:
        self._saved.clear()
        self._spans.clear()
        if self._disk is not None:
            self._disk.close()
        if self._span_disk is not None:
            self._span_disk.close()
        for sampler in self._samplers.values():
            llama_cpp.llama_sampler_free(sampler)
        self._samplers.clear()
        for state in self._constrained.values():
            self._free_constrained(state)
        self._constrained.clear()
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.tokenizer.close()
            llama_cpp.llama_model_free(self.model)
            self.model = None
