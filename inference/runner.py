"""The only module that touches llama.cpp: one context, one batch per step, per-sequence sampling.

Everything else in `inference/` is pure Python and is driven in tests by a fake runner with the
same surface (see `inference.engine.Runner`).
"""

from __future__ import annotations

import ctypes
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from inference.kvdisk import DiskKvStore
from inference.scheduler import (
    CompactKv,
    DecodeItem,
    DropSaved,
    KvOp,
    PrefillChunk,
    RestoreKv,
    SaveKv,
    SchedulerOutput,
    ShareKv,
    SpillSaved,
)
from inference.types import (
    NO_ENTRY,
    ChatMessage,
    KvPoolLost,
    PromptPart,
    Request,
    RestoreFailed,
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


class RunnerError(RuntimeError):
    pass


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
    ) -> None:
        install_log_callback()
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
        if not self.model:
            raise RunnerError(f"llama.cpp could not load the model at {model_path}")
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
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = max_batch_tokens
        cparams.n_ubatch = max_batch_tokens
        cparams.n_seq_max = n_seq_max
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
        self._saved: dict[int, np.ndarray[Any, np.dtype[np.uint8]]] = {}
        self._disk = disk_store  # saved sequences spilled beyond host memory, or None

        self._samplers: dict[str, Any] = {}
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
            if item.completes_prompt:
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

    def _sample(self, req: Request, idx: int) -> int:
        if req.params.greedy:
            ptr = llama_cpp.llama_get_logits_ith(self.ctx, idx)
            logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
            return int(logits.argmax())
        sampler = self._samplers.get(req.request_id)
        if sampler is None:
            sampler = self._samplers[req.request_id] = self._make_sampler(req)
        return int(llama_cpp.llama_sampler_sample(sampler, self.ctx, idx))

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

    def close(self) -> None:
        self._saved.clear()
        if self._disk is not None:
            self._disk.close()
        for sampler in self._samplers.values():
            llama_cpp.llama_sampler_free(sampler)
        self._samplers.clear()
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.tokenizer.close()
            llama_cpp.llama_model_free(self.model)
            self.model = None
