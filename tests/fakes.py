"""A fake runner: the engine's model seam, scripted and strict.

Tokens are bytes: a token id is a UTF-8 byte value + 10 (ids below 10 are special; 1 is the end
of generation). The reply to a conversation is scripted from its last message, so it does not
depend on how requests are batched. Like llama.cpp, the fake keeps each sequence's KV (a token
list) and checks every batch: positions must continue the sequence, and when a request samples,
its sequence must hold exactly its prompt and its reply so far. A scheduler bug that leaks one
conversation into another, or skips a position, fails loudly here. Saved sequences (host memory)
are token lists too: a save must copy exactly what the sequence holds, a restore must name an
entry that exists and was not dropped, and the saved entries must stay within the host budget.
Passages computed once (`SaveSpan`) are kept with the tokens before them (their anchor), and a
placed passage (`PlaceSpan`) must land exactly where its sequence ends, at the position its
tokens have in the prompt: placed elsewhere, or in the wrong order, the next batch or sample
fails here. Each placement records how far its cells moved.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.engine import Engine
from inference.scheduler import (
    CompactKv,
    DropSaved,
    DropSpan,
    KvOp,
    PlaceSpan,
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
from knowledge.embeddings import HashingEmbedder

EOG = 1
OFFSET = 10
TRUSTED = 1_000  # the chat template's own text gets other ids, as control tokens do in a model
PAIR = 100_000  # ids of two-letter tokens, made only by tokenize(merge_pairs=True)


def encode(text: str, *, trusted: bool = False) -> list[int]:
    offset = TRUSTED if trusted else OFFSET
    return [b + offset for b in text.encode("utf-8")]


def _token_bytes(t: int) -> bytes:
    if t >= PAIR:
        return bytes(divmod(t - PAIR, 256))
    if t >= TRUSTED:
        return bytes([t - TRUSTED])
    return bytes([t - OFFSET]) if t >= OFFSET else b""


def decode(tokens: Sequence[int]) -> str:
    return b"".join(_token_bytes(t) for t in tokens).decode("utf-8", errors="replace")


UNPARSABLE = "UNPARSABLE"  # a grammar holding this is refused, as llama.cpp refuses bad GBNF


def instance_of(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """The simplest JSON value valid against `schema` (as inference.constraints.check_schema
    leaves it; patterns are not honoured): what a grammar-constrained model could produce."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 20:
        return None
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        defs = {**root.get("definitions", {}), **root.get("$defs", {})}
        return instance_of(defs.get(name), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return instance_of(schema[key][0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = instance_of(part, root, depth + 1)
            merged.update(value if isinstance(value, dict) else {})
        return merged
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {k: instance_of(v, root, depth + 1) for k, v in properties.items()}
    if kind == "array":
        if "prefixItems" in schema:
            return [instance_of(s, root, depth + 1) for s in schema["prefixItems"]]
        n = min(max(schema.get("minItems", 0), 1), schema.get("maxItems", 1))
        return [instance_of(schema.get("items", {"type": "string"}), root, depth + 1)] * n
    if kind == "string":
        formats = {"date": "2026-01-02", "date-time": "2026-01-02T03:04:05Z", "time": "03:04:05Z"}
        if str(schema.get("format", "")).startswith("uuid"):
            return "123e4567-e89b-12d3-a456-426614174000"
        return formats.get(str(schema.get("format")), "x" * max(1, schema.get("minLength", 1)))
    return {"number": 1.5, "integer": 1, "boolean": True}.get(kind)


def constrained_reply(constraint: Constraint) -> str:
    """The text a model held to `constraint` could write: the prefix, the simplest valid JSON,
    the suffix; with `repeat`, one block for each of the schema's first two alternatives
    (parallel tool calls)."""
    if not constraint.schema:
        return json.dumps({"reply": "echo"})
    schema = json.loads(constraint.schema)
    options = schema.get("anyOf", [schema])[:2] if constraint.repeat else [schema]
    blocks = [
        constraint.prefix
        + json.dumps(instance_of(option, schema), ensure_ascii=False)
        + constraint.suffix
        for option in options
    ]
    return "\n".join(blocks)


@dataclass
class BatchRecord:
    decodes: list[str]  # request ids
    prefills: list[tuple[str, int]]  # (request id, chunk length)
    num_tokens: int


@dataclass
class FakeSpan:
    """A passage's KV as the fake keeps it: its tokens, the position they were computed at and
    the tokens they were computed after."""

    tokens: list[int]
    start: int
    anchor: list[int]


@dataclass(frozen=True)
class Placement:
    seq_id: int
    entry: int
    at: int
    n_tokens: int
    shift: int  # positions the cells moved from where they were computed


@dataclass
class FakeRunner:
    n_seq_max: int = 4
    n_ctx: int = 4096
    max_seq_tokens: int = 1024
    kv_unified: bool = True
    step_delay: float = 0.0  # seconds each step "decodes", for tests that race a stop
    # While set and closed, each step waits in "llama_decode" until it opens: an engine busy
    # with a long step (a model under load), for tests of what happens meanwhile.
    gate: threading.Event | None = None
    # What llama_decode "took" for (decode tokens, prompt tokens), reported without sleeping.
    step_seconds: Callable[[int, int], float] | None = None
    fail_restores: bool = False
    reply_for: Callable[[str], str] = field(default=lambda prompt: f"echo: {prompt}")
    last_decode_seconds: float = 0.0
    kv: dict[int, list[int]] = field(default_factory=dict)
    batches: list[BatchRecord] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    fail_next: bool = False
    merge_pairs: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    tokenized_parts: list[list[PromptPart]] = field(default_factory=list)
    kv_bytes_per_token: int = 100
    host_budget_bytes: int | None = None  # when set, saved entries must fit in it
    saved: dict[int, list[int]] = field(default_factory=dict)
    saves: list[SaveKv] = field(default_factory=list)
    restores: list[RestoreKv] = field(default_factory=list)
    # The disk tier: entry -> (tenant, tokens); what an earlier run left, until bound.
    disk_budget_bytes: int | None = None
    disk: dict[int, tuple[str, list[int]]] = field(default_factory=dict)
    spills: list[SpillSaved] = field(default_factory=list)
    left_on_disk: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    lose_disk_entries: bool = False  # files deleted behind the worker's back
    compactions: int = 0
    shares: list[ShareKv] = field(default_factory=list)
    fail_compaction: bool = False  # the pool is cleared, then reading it back fails
    kv_log: list[list[Any]] = field(default_factory=list)  # each step's KV operations
    fail_copies: bool = False  # copying KV into another sequence fails (it is left empty)
    constraints: list[Constraint] = field(default_factory=list)  # what check_constraint saw
    last_logprobs: dict[str, TokenLogprobs] = field(default_factory=dict)
    grammar_tokens: int = 0  # the fake's constrained replies need no second sampling
    grammar_resamples: int = 0
    grammar_step_seconds: float = 0.0
    last_grammar_seconds: dict[str, float] = field(default_factory=dict)
    # What a constrained request's grammar "took" in a step (from its output so far), reported
    # without sleeping; None: nothing.
    grammar_seconds: Callable[[Request], float] | None = None
    # Passages computed once: entry -> its KV, in memory and on disk; budgets when set.
    spans: dict[int, FakeSpan] = field(default_factory=dict)
    span_disk: dict[int, tuple[str, str, FakeSpan]] = field(default_factory=dict)
    span_budget_bytes: int | None = None
    span_disk_budget_bytes: int | None = None
    placements: list[Placement] = field(default_factory=list)
    span_saves: list[SaveSpan] = field(default_factory=list)
    fail_placements: bool = False
    passage_kv: bool = True  # the model's keys can be moved (RoPE the runner knows)
    left_span_files: dict[str, tuple[str, str, list[int], int]] = field(default_factory=dict)

    @property
    def saved_bytes(self) -> int:
        return sum(len(v) for v in self.saved.values()) * self.kv_bytes_per_token

    @property
    def disk_bytes(self) -> int:
        return sum(len(t) for _, t in self.disk.values()) * self.kv_bytes_per_token

    def disk_entries(self) -> list[tuple[str, list[int], str]]:
        return [(tenant, tokens, key) for key, (tenant, tokens) in self.left_on_disk.items()]

    @property
    def span_bytes(self) -> int:
        return sum(len(v.tokens) for v in self.spans.values()) * self.kv_bytes_per_token

    @property
    def span_disk_bytes(self) -> int:
        return sum(len(v[2].tokens) for v in self.span_disk.values()) * self.kv_bytes_per_token

    def span_files(self) -> list[tuple[str, str, list[int], int, str]]:
        """Passages an earlier run left on disk: (tenant, key, tokens, start, name)."""
        return [(t, k, toks, st, name) for name, (t, k, toks, st) in self.left_span_files.items()]

    def bind_span_file(self, name: str, entry: int | None) -> None:
        tenant, key, tokens, start = self.left_span_files.pop(name)
        if entry is not None:
            self.span_disk[entry] = (tenant, key, FakeSpan(tokens, start, []))

    def bind_disk_entry(self, key: str, entry: int | None) -> None:
        found = self.left_on_disk.pop(key)
        if entry is not None:
            self.disk[entry] = found

    def render_prompt(self, messages: Sequence[ChatMessage]) -> list[PromptPart]:
        parts: list[PromptPart] = []
        for m in messages:
            parts += [PromptPart(f"<{m.role}>", True), PromptPart(m.content, False)]
            parts.append(PromptPart("\n", True))
        parts.append(PromptPart("<assistant>", True))
        self.prompts[prompt_text(parts)] = messages[-1].content
        return parts

    def tokenize_parts(
        self, parts: Sequence[PromptPart], *, continuation: bool = False
    ) -> list[int]:
        self.tokenized_parts.append(list(parts))
        return [
            t
            for part in parts
            for t in (encode(part.text, trusted=True) if part.trusted else self.tokenize(part.text))
        ]

    def tokenize(self, text: str) -> list[int]:
        tokens = encode(text)
        if not self.merge_pairs:
            return tokens
        # Like a real BPE vocabulary: tokenising text can give other tokens than generating it.
        merged: list[int] = []
        for t in tokens:
            if (
                merged
                and merged[-1] < PAIR
                and chr(merged[-1] - OFFSET).isalpha()
                and chr(t - OFFSET).isalpha()
            ):
                merged[-1] = PAIR + (merged[-1] - OFFSET) * 256 + (t - OFFSET)
            else:
                merged.append(t)
        return merged

    def reply_tokens(self, request: Request) -> list[int]:
        """The scripted reply; a constrained request's is what its constraint allows (the
        fake honours it as a grammar would: no other text can come out)."""
        constraint = request.params.constraint
        if constraint is not None:
            return [*encode(constrained_reply(constraint)), EOG]
        text = decode(request.prompt_tokens)
        # The rendered conversation, then the reply's unseen start (SamplingParams.reply_start).
        rendered = max((k for k in self.prompts if text.startswith(k)), key=len)
        return [*encode(self.reply_for(self.prompts[rendered])), EOG]

    def check_constraint(self, constraint: Constraint) -> None:
        self.constraints.append(constraint)
        if UNPARSABLE in constraint.grammar:
            raise ValueError("llama.cpp could not parse the grammar")

    def token_bytes(self, token: int) -> bytes:
        return _token_bytes(token)

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        failed: list[tuple[int, int]] = []
        self.kv_log.append(list(out.kv_ops))
        for action in out.kv_ops:
            if isinstance(action, SaveKv):
                held = self.kv.get(action.seq_id, [])
                assert len(held) == action.n_tokens, "a save must copy the whole sequence"
                assert action.entry not in self.saved, "a saved entry is never overwritten"
                assert action.entry not in self.disk, "a saved entry is never overwritten"
                self.saved[action.entry] = list(held)
                self.saves.append(action)
            elif isinstance(action, SpillSaved):
                spilled = self.saved.pop(action.entry)  # only a memory entry is spilled
                assert spilled == list(action.tokens), "a spill names the entry's exact tokens"
                if not self.lose_disk_entries:
                    self.disk[action.entry] = (action.tenant, spilled)
                self.spills.append(action)
            elif isinstance(action, RestoreKv):
                if action.entry in self.saved:
                    tokens: list[int] | None = self.saved[action.entry]
                else:
                    tokens = self.disk.get(action.entry, ("", None))[1]
                    assert tokens is not None or self.lose_disk_entries, (
                        "restoring an entry that was dropped"
                    )
                if self.fail_restores or tokens is None:
                    self.kv[action.seq_id] = []  # llama.cpp leaves the sequence empty
                    failed.append((action.seq_id, action.entry))
                    continue
                assert len(tokens) == action.n_tokens
                self.kv[action.seq_id] = list(tokens)
                self.restores.append(action)
            elif isinstance(action, ShareKv):
                assert self.kv_unified, "with a stream per sequence no cells are shared"
                held = self.kv.get(action.seq_id, [])
                if held:  # (empty when its restore just failed: then it is cleared anyway)
                    source = self.kv.get(action.source, [])
                    n = action.n_tokens
                    assert len(source) >= n, "sharing cells the source does not hold"
                    assert held[:n] == source[:n], "sharing cells of other tokens"
                self.shares.append(action)
            elif isinstance(action, CompactKv):
                assert self.kv_unified, "a stream per sequence has no pool to pack"
                # Packing moves cells, never changes what a sequence holds.
                self.compactions += 1
                if self.fail_compaction:
                    self.kv.clear()
                    raise KvPoolLost("packing the KV pool failed")
            elif isinstance(action, DropSaved):
                found = self.saved.pop(action.entry, None) or self.disk.pop(action.entry, None)
                assert found is not None or self.lose_disk_entries, "dropping a missing entry"
            elif isinstance(action, SaveSpan):
                held = self.kv.get(action.seq_id, [])
                end = action.start + action.n_tokens
                assert len(held) == end, "a passage is saved right after it was computed"
                assert action.entry not in self.spans
                assert action.entry not in self.span_disk
                self.spans[action.entry] = FakeSpan(
                    held[action.start : end], action.start, held[: action.start]
                )
                self.span_saves.append(action)
            elif isinstance(action, SpillSpan):
                kept = self.spans.pop(action.entry)  # only a passage in memory is spilled
                assert kept.tokens == list(action.tokens)
                assert kept.start == action.start
                self.span_disk[action.entry] = (action.tenant, action.key, kept)
            elif isinstance(action, DropSpan):
                found_span = self.spans.pop(action.entry, None) or self.span_disk.pop(
                    action.entry, None
                )
                assert found_span is not None, "dropping a passage that is not kept"
            elif isinstance(action, PlaceSpan):
                assert self.passage_kv, "placing passage KV on a model whose keys cannot move"
                span = self.spans.get(action.entry) or (
                    self.span_disk[action.entry][2] if action.entry in self.span_disk else None
                )
                assert span is not None, "placing a passage that is not kept"
                held = self.kv.get(action.seq_id, [])
                if self.fail_placements or action.seq_id in {seq for seq, _ in failed}:
                    self.kv[action.seq_id] = []
                    failed.append((action.seq_id, action.entry))
                    continue
                # llama.cpp would accept cells anywhere; a wrong position is a wrong answer.
                assert len(held) == action.at, (
                    f"sequence {action.seq_id}: a passage placed at {action.at} after "
                    f"{len(held)} tokens"
                )
                assert action.offset + action.n_tokens <= len(span.tokens)
                held.extend(span.tokens[action.offset : action.offset + action.n_tokens])
                self.kv[action.seq_id] = held
                shift = action.at - (span.start + action.offset)
                self.placements.append(
                    Placement(action.seq_id, action.entry, action.at, action.n_tokens, shift)
                )
            elif not self._kv_op(action, lost={seq for seq, _ in failed}):
                failed.append((action.seq_id, NO_ENTRY))
            if self.host_budget_bytes is not None:
                assert self.saved_bytes <= self.host_budget_bytes, "host cache over its budget"
            if self.disk_budget_bytes is not None:
                assert self.disk_bytes <= self.disk_budget_bytes, "disk cache over its budget"
            if self.span_budget_bytes is not None:
                assert self.span_bytes <= self.span_budget_bytes, "passage KV over its budget"
            if self.span_disk_budget_bytes is not None:
                assert self.span_disk_bytes <= self.span_disk_budget_bytes, (
                    "passage KV on disk over its budget"
                )
        if failed:
            raise RestoreFailed(failed)
        if out.is_empty:
            return {}
        self.last_logprobs = {}
        self.last_grammar_seconds = {}
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("llama_decode failed with status -3")
        for d in out.decodes:
            self._append(d.seq_id, d.pos, [d.token])
        for c in out.prefills:
            self._append(c.seq_id, c.start, c.tokens)
        self.batches.append(
            BatchRecord(
                [d.request.request_id for d in out.decodes],
                [(c.request.request_id, len(c.tokens)) for c in out.prefills],
                out.num_tokens,
            )
        )
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.step_delay:
            time.sleep(self.step_delay)
        self.last_decode_seconds = self.step_delay
        if self.step_seconds is not None:
            self.last_decode_seconds = self.step_seconds(
                len(out.decodes), sum(len(c.tokens) for c in out.prefills)
            )
        sampled = {}
        for request in out.sampling_requests():
            assert request.seq_id is not None
            held = self.kv[request.seq_id]
            assert held == request.prompt_tokens + request.output_tokens, (
                f"sequence {request.seq_id} holds other tokens than request {request.request_id}"
            )
            script = self.reply_tokens(request)
            token = script[min(len(request.output_tokens), len(script) - 1)]
            sampled[request.request_id] = token
            if request.params.constraint is not None:
                self.grammar_tokens += 1
                took = self.grammar_seconds(request) if self.grammar_seconds else 0.0
                self.last_grammar_seconds[request.request_id] = took
            if request.params.logprobs is not None:
                # The scripted token is the likeliest; made-up alternatives follow it.
                top = tuple((token + i, -0.25 - 1.5 * i) for i in range(request.params.logprobs))
                self.last_logprobs[request.request_id] = TokenLogprobs(-0.25, top)
        return sampled

    def _kv_op(self, op: KvOp, lost: set[int]) -> bool:
        held = self.kv.get(op.seq_id, [])
        self.kv[op.seq_id] = held[: op.keep]
        if op.copy_from is not None and op.copy_len:
            assert op.keep == 0, "a copy replaces the whole sequence"
            if self.fail_copies or op.copy_from in lost:
                return False  # like the runner: the sequence is left empty
            self.kv[op.seq_id] = list(self.kv.get(op.copy_from, [])[: op.copy_len])
            assert len(self.kv[op.seq_id]) == op.copy_len, "copied cells must exist"
        return True

    def _append(self, seq_id: int, pos: int, tokens: list[int]) -> None:
        held = self.kv.setdefault(seq_id, [])
        assert pos == len(held), f"sequence {seq_id}: position {pos} after {len(held)} tokens"
        held.extend(tokens)
        assert sum(len(v) for v in self.kv.values()) <= self.n_ctx, "KV cells oversubscribed"

    def release(self, request: Request) -> None:
        self.released.append(request.request_id)

    def close(self) -> None:
        self.kv.clear()


def make_engine(
    runner: FakeRunner | None = None,
    *,
    max_batch_tokens: int = 64,
    max_queue: int = 8,
    **kwargs: Any,
) -> Engine:
    return Engine(
        runner or FakeRunner(), max_batch_tokens=max_batch_tokens, max_queue=max_queue, **kwargs
    )


@dataclass
class FakeCounter:
    """The web process's prompt counter, tokenizing as the fake runner does."""

    runner: FakeRunner = field(default_factory=FakeRunner)

    @property
    def max_seq_tokens(self) -> int:
        return self.runner.max_seq_tokens

    def count(self, messages: Sequence[ChatMessage]) -> int:
        parts = self.runner.render_prompt(messages)
        return sum(len(encode(p.text)) for p in parts)

    def count_text(self, text: str) -> int:
        return len(encode(text))


class FakeEmbedder(HashingEmbedder):
    """The embedding model's seam: knowledge.embeddings.HashingEmbedder (a text's vector counts
    its words, hashed into 512 dimensions), under a name of its own and counting its calls.
    Texts sharing words are similar, others are not; deterministic across runs."""

    name = "fake-embedder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []  # (kind, texts)

    def embed_passages(self, texts: Sequence[str]) -> Any:
        self.calls.append(("passage", len(texts)))
        return super().embed_passages(texts)

    def embed_queries(self, texts: Sequence[str]) -> Any:
        self.calls.append(("query", len(texts)))
        return super().embed_queries(texts)
