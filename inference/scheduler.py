"""Continuous-batching scheduler: which sequences decode and which prompt chunks prefill each step.

Pure logic, no model and no I/O. Each engine step is `schedule()` -> runner executes the batch ->
`update()` with the sampled tokens. A request joins at the first step after it arrives, leaves the
step it finishes, and its sequence is reused at once.

Sequences keep their KV after a request finishes (llama.cpp's "slot prompt cache"): the next
request whose prompt shares a prefix with what a sequence holds, or with what any other sequence
holds (copied with `llama_memory_seq_cp`, which shares the cells), prefills only the rest. That is
how a follow-up turn of a conversation, or a tenant's long system prompt, is not recomputed.

KV memory is never oversubscribed: a running request reserves room for its prompt plus the most
tokens it may generate, and kept caches of idle sequences are evicted, least recently used first,
to make room. So `llama_decode` never runs out of cells and nothing needs preempting.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from inference.types import FinishReason, Request, RequestStatus


class WaitingQueue:
    """Requests not yet running, ordered by a policy: `priority` (higher first, then FCFS) or
    `fcfs`, background work last. Bounded: `add` refuses when full so the caller can answer
    "busy" at once."""

    def __init__(self, max_size: int, policy: str = "priority") -> None:
        if policy not in {"priority", "fcfs"}:
            raise ValueError(f"unknown queue policy {policy!r}")
        self.max_size = max_size
        self.policy = policy
        self._items: list[tuple[tuple[bool, int, int], Request]] = []
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return (req for _, req in self._items)

    @property
    def full(self) -> bool:
        return len(self._items) >= self.max_size

    def add(self, request: Request) -> bool:
        if self.full:
            return False
        rank = -request.priority if self.policy == "priority" else 0
        # Background work (titles) comes after every reply, whatever its priority.
        key = (request.background, rank, next(self._counter))
        bisect.insort(self._items, (key, request), key=lambda item: item[0])
        return True

    def peek(self) -> Request | None:
        return self._items[0][1] if self._items else None

    def pop(self) -> Request:
        return self._items.pop(0)[1]

    def remove(self, request_id: str) -> Request | None:
        for i, (_, req) in enumerate(self._items):
            if req.request_id == request_id:
                del self._items[i]
                return req
        return None


@dataclass
class Slot:
    """One llama.cpp sequence id and the tokens whose KV it holds."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    request: Request | None = None
    last_used: int = 0


@dataclass(frozen=True)
class KvOp:
    """Before the batch: drop `seq_id`'s cells from position `keep` on; then, if `copy_from` is
    set, share the source sequence's cells for positions [0, copy_len)."""

    seq_id: int
    keep: int
    copy_from: int | None = None
    copy_len: int = 0


@dataclass(frozen=True)
class DecodeItem:
    request: Request
    seq_id: int
    token: int
    pos: int


@dataclass(frozen=True)
class PrefillChunk:
    request: Request
    seq_id: int
    start: int
    tokens: list[int]

    @property
    def completes_prompt(self) -> bool:
        return self.start + len(self.tokens) >= len(self.request.prompt_tokens)


@dataclass
class SchedulerOutput:
    kv_ops: list[KvOp] = field(default_factory=list)
    decodes: list[DecodeItem] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.decodes) + sum(len(c.tokens) for c in self.prefills)

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills

    def sampling_requests(self) -> list[Request]:
        """Requests that get a next token from this batch, in batch order."""
        return [d.request for d in self.decodes] + [
            c.request for c in self.prefills if c.completes_prompt
        ]


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Scheduler:
    def __init__(
        self,
        *,
        n_seq_max: int,
        kv_capacity: int,
        max_batch_tokens: int,
        max_queue: int,
        policy: str = "priority",
        max_running: int | None = None,
    ) -> None:
        if max_batch_tokens < n_seq_max:
            raise ValueError("max_batch_tokens must hold one decode token per sequence")
        self.slots = [Slot(seq_id=i) for i in range(n_seq_max)]
        self.kv_capacity = kv_capacity
        self.max_batch_tokens = max_batch_tokens
        self.max_running = min(max_running or n_seq_max, n_seq_max)
        self.waiting = WaitingQueue(max_queue, policy)
        self.running: list[Request] = []
        self._requests: dict[str, Request] = {}
        self._pending_ops: list[KvOp] = []
        self._step = 0

    # --- admission and removal ---------------------------------------------------------------

    def add(self, request: Request) -> bool:
        """Queue a request; False when the waiting queue is full."""
        if request.request_id in self._requests:
            raise ValueError(f"duplicate request id {request.request_id}")
        if not self.waiting.add(request):
            return False
        self._requests[request.request_id] = request
        return True

    def get(self, request_id: str) -> Request | None:
        return self._requests.get(request_id)

    def finish(self, request: Request, reason: FinishReason) -> None:
        """End a request now (stop, length, cancel or error) and free its sequence."""
        if request.status.is_finished:
            return
        if request.status is RequestStatus.WAITING:
            self.waiting.remove(request.request_id)
        else:
            self.running.remove(request)
            slot = self.slots[request.seq_id] if request.seq_id is not None else None
            if slot is not None:
                slot.request = None
                slot.last_used = self._step
                if reason is FinishReason.ERROR:
                    # The KV may be half written: forget it rather than reuse it.
                    slot.tokens = []
                    self._pending_ops.append(KvOp(slot.seq_id, keep=0))
                else:
                    slot.tokens = request.kv_tokens()
        request.finish(reason)
        del self._requests[request.request_id]

    def queue_position(self, request_id: str) -> int | None:
        for i, req in enumerate(self.waiting, start=1):
            if req.request_id == request_id:
                return i
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def free_slots(self) -> int:
        return self.max_running - len(self.running)

    # --- one step ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        self._step += 1
        out = SchedulerOutput(kv_ops=self._pending_ops)
        self._pending_ops = []
        budget = self.max_batch_tokens

        for req in self.running:
            if req.prefill_done and req.output_tokens:
                assert req.seq_id is not None
                out.decodes.append(
                    DecodeItem(req, req.seq_id, req.output_tokens[-1], req.num_tokens - 1)
                )
                budget -= 1

        while budget > 0 and len(self.running) < self.max_running and self.waiting:
            head = self.waiting.peek()
            assert head is not None
            if head.background and not self._room_for_background():
                break  # background work waits for a quiet moment; it never slows a reply
            if not self._admit(head, out):
                break  # not enough KV room yet: the head waits, so nobody jumps it
            self.waiting.pop()

        # Replies' prompts before background work's, each in order of admission.
        for req in sorted(self.running, key=lambda r: r.background):
            if budget <= 0:
                break
            if not req.prefill_done:
                n = min(budget, len(req.prompt_tokens) - req.num_computed)
                start = req.num_computed
                assert req.seq_id is not None
                tokens = req.prompt_tokens[start : start + n]
                out.prefills.append(PrefillChunk(req, req.seq_id, start, tokens))
                budget -= n
        return out

    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Record what the batch computed; return the requests that got a new token."""
        for chunk in out.prefills:
            chunk.request.num_computed = chunk.start + len(chunk.tokens)
        advanced = []
        for req in out.sampling_requests():
            token = sampled.get(req.request_id)
            if token is not None and not req.status.is_finished:
                req.output_tokens.append(token)
                advanced.append(req)
        return advanced

    def _room_for_background(self) -> bool:
        """Half the sequences free, and few background requests running already."""
        running_background = sum(r.background for r in self.running)
        return len(self.running) < self.max_running // 2 and running_background < max(
            1, self.max_running // 8
        )

    # --- KV placement ------------------------------------------------------------------------

    def _reserve(self, req: Request) -> int:
        return len(req.prompt_tokens) + req.params.max_tokens

    def _kv_in_use(self) -> int:
        return sum(
            self._reserve(s.request) if s.request is not None else len(s.tokens) for s in self.slots
        )

    def _admit(self, req: Request, out: SchedulerOutput) -> bool:
        free = [s for s in self.slots if s.request is None]
        if not free:
            return False
        # At least the last prompt token must be decoded, to get logits to sample from.
        usable = len(req.prompt_tokens) - 1

        def reuse(slot: Slot) -> int:
            n = min(common_prefix_len(slot.tokens, req.prompt_tokens), usable)
            # Taking over a kept conversation for a short shared prefix would throw the rest
            # away: below half of what it holds, the prefix is copied and the cache is kept.
            return n if 2 * n >= len(slot.tokens) else 0

        # Longest reusable prefix first; else an empty sequence before evicting a kept cache;
        # else the least recently used cache.
        target = max(free, key=lambda s: (reuse(s), not s.tokens, -s.last_used))
        keep = reuse(target)
        source, copy_len = None, 0
        for slot in self.slots:
            if slot is target:
                continue
            held = slot.request.kv_tokens() if slot.request is not None else slot.tokens
            n = min(common_prefix_len(held, req.prompt_tokens), usable)
            if n > max(keep, copy_len):
                source, copy_len = slot, n

        need = self._reserve(req) - len(target.tokens)
        evictable = sorted(
            (s for s in free if s is not target and s is not source and s.tokens),
            key=lambda s: s.last_used,
        )
        in_use = self._kv_in_use()
        evictions = []
        while in_use + need > self.kv_capacity and evictable:
            victim = evictable.pop(0)
            in_use -= len(victim.tokens)
            evictions.append(victim)
        if in_use + need > self.kv_capacity:
            return False

        if source is not None:
            out.kv_ops.append(KvOp(target.seq_id, 0, source.seq_id, copy_len))
            req.num_computed = req.num_cached = copy_len
        else:
            out.kv_ops.append(KvOp(target.seq_id, keep))
            req.num_computed = req.num_cached = keep
        for victim in evictions:
            victim.tokens = []
            out.kv_ops.append(KvOp(victim.seq_id, 0))
        target.tokens = req.prompt_tokens[: req.num_computed]
        target.request = req
        target.last_used = self._step
        req.seq_id = target.seq_id
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        return True
