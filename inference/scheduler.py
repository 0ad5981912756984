"""Continuous-batching scheduler: which sequences decode and which prompt chunks prefill each step.

Pure logic, no model and no I/O. Each engine step is `schedule()` -> runner executes the batch ->
`update()` with the sampled tokens. A request joins at the first step after it arrives, leaves the
step it finishes, and its sequence is reused at once.

Sequences keep their KV after a request finishes (llama.cpp's "slot prompt cache"): the next
request whose prompt shares a prefix with what a sequence holds, or with what any other sequence
holds (copied with `llama_memory_seq_cp`, which shares the cells), prefills only the rest. That is
how a follow-up turn of a conversation, or a tenant's long system prompt, is not recomputed.
Reuse and copies stay within a tenant. When a kept sequence has been idle for a few steps, or
is taken over or evicted, its KV is first saved to host memory (`inference.hostcache`, within a
budget) and its cells are freed; a returning conversation restores it instead of recomputing,
sharing the cells of a prefix another sequence holds. Every token attends over the whole range
of cells in use in llama.cpp's pool, holes included, so the pool is packed (`CompactKv`) once
enough cells were freed. With a stream of cells per sequence instead (`shared_pool=False`), a
copied prefix is a copy, nothing needs packing, and running requests are kept at the lowest
sequence ids (`_pack_running`), because llama.cpp computes each run of consecutive ids in a
pass of its own.

Which waiting request goes next is `inference.fairshare`'s weighted fair share between tenants;
how many run together is `max_running`, which the engine sets from the speed floor.

KV memory is never oversubscribed: a running request reserves room for its prompt plus the most
tokens it may generate, and kept caches of idle sequences are evicted, least recently used first,
to make room. So `llama_decode` never runs out of cells and nothing needs preempting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from inference import fairshare
from inference.hostcache import HostCache, common_prefix_len
from inference.passages import SpanCache
from inference.types import NO_ENTRY, FinishReason, Request, RequestStatus, Span

POLICIES = ("fair", "priority", "fcfs")
MIN_RESTORE_GAIN = 16  # restore from host memory only when it saves more than this many tokens
# A restored conversation takes over the cells of a prefix this long or longer that another
# sequence holds (a tenant's system prompt) instead of keeping a copy of its own.
MIN_SHARE = 32
TAKEOVER_SLACK = 1  # tokens of a kept conversation its next turn may drop (a template edge)
# A prompt that computes at most this many tokens (a turn's new message) goes whole into a
# step beside running streams, and a step carries at most this many such tokens beyond its
# prompt budget.
SHORT_PROMPT = 64
# Freed cells leave holes in llama.cpp's pool that every token still visits (its attention
# spans the pool's range, not just the cells in use): once at least this many, and as many as
# are in use, have been freed since the last compaction, the pool is packed again.
COMPACT_MIN_FREED = 2048

__all__ = ["common_prefix_len"]


def entry_of(request: Request) -> fairshare.Entry:
    return fairshare.Entry(
        key=request.request_id,
        tenant=request.tenant,
        weight=fairshare.tenant_weight(request.priority),
        follow_up=request.follow_up,
        background=request.background,
        arrival=request.arrival,
    )


class WaitingQueue:
    """Requests not yet running, in the order a policy admits them: `fair` (weighted fair share
    between tenants, see `inference.fairshare`), `priority` (higher first, then arrival) or
    `fcfs`; background work last in each. Bounded: `add` refuses when full so the caller can
    answer "busy" at once. Times are `time.monotonic()` seconds unless the caller passes `now`."""

    def __init__(self, max_size: int, policy: str = "fair", *, aging: float = 30.0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown queue policy {policy!r}")
        self.max_size = max_size
        self.policy = policy
        self.aging = aging
        self.clock = fairshare.FairClock()
        self._items: list[Request] = []  # arrival order
        self._cached: tuple[tuple[int, int], list[Request]] | None = None
        self._version = 0

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.ordered())

    @property
    def full(self) -> bool:
        return len(self._items) >= self.max_size

    def add(self, request: Request) -> bool:
        if self.full:
            return False
        self._items.append(request)
        self._version += 1
        return True

    def ordered(self, now: float | None = None) -> list[Request]:
        """Every waiting request in admission order (recomputed at most once a second while
        nothing changes: aging can reorder with time alone)."""
        now = time.monotonic() if now is None else now
        stamp = (self._version, int(now))
        if self._cached is not None and self._cached[0] == stamp:
            return self._cached[1]
        if self.policy == "fair":
            by_id = {r.request_id: r for r in self._items}
            entries = fairshare.order(map(entry_of, self._items), self.clock, now, self.aging)
            result = [by_id[e.key] for e in entries]
        else:
            result = sorted(
                self._items,
                key=lambda r: (r.background, -r.priority if self.policy == "priority" else 0),
            )
        self._cached = (stamp, result)
        return result

    def peek(self, now: float | None = None) -> Request | None:
        if not self._items:
            return None
        if self.policy != "fair":
            return self.ordered(now)[0]
        now = time.monotonic() if now is None else now
        entry = fairshare.choose([entry_of(r) for r in self._items], self.clock, now, self.aging)
        assert entry is not None
        return next(r for r in self._items if r.request_id == entry.key)

    def pop(self, now: float | None = None) -> Request:
        request = self.peek(now)
        if request is None:
            raise IndexError("pop from an empty queue")
        self._items.remove(request)
        self._version += 1
        fairshare.admitted(entry_of(request), self.clock)
        return request

    def take(self, request: Request) -> None:
        """Admit `request`, which need not be the head (a short prompt passing a long one
        that waits for the prompts being computed), and charge its tenant's share."""
        self._items.remove(request)
        self._version += 1
        fairshare.admitted(entry_of(request), self.clock)

    def remove(self, request_id: str) -> Request | None:
        for i, req in enumerate(self._items):
            if req.request_id == request_id:
                del self._items[i]
                self._version += 1
                return req
        return None

    def older_than(self, cutoff: float) -> list[Request]:
        return [r for r in self._items if r.since < cutoff]

    def oldest_since(self) -> float | None:
        """When the longest-waiting reply (background work aside) was asked, or None."""
        sinces = [r.since for r in self._items if not r.background]
        return min(sinces) if sinces else None


@dataclass
class Slot:
    """One llama.cpp sequence id and the tokens whose KV it holds."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    request: Request | None = None
    last_used: int = 0
    tenant: str = ""  # whose KV the sequence holds: reused only for the same tenant


@dataclass(frozen=True)
class KvOp:
    """Before the batch: drop `seq_id`'s cells from position `keep` on; then, if `copy_from` is
    set, share the source sequence's cells for positions [0, copy_len)."""

    seq_id: int
    keep: int
    copy_from: int | None = None
    copy_len: int = 0


@dataclass(frozen=True)
class SaveKv:
    """Before the batch: copy `seq_id`'s KV (its first `n_tokens` positions, all it holds) into
    host memory as entry `entry`."""

    seq_id: int
    entry: int
    n_tokens: int


@dataclass(frozen=True)
class RestoreKv:
    """Before the batch: replace `seq_id`'s KV by host entry `entry` (`n_tokens` positions)."""

    seq_id: int
    entry: int
    n_tokens: int


@dataclass(frozen=True)
class DropSaved:
    """Free host entry `entry` (in memory or on disk)."""

    entry: int


@dataclass(frozen=True)
class SpillSaved:
    """Move host entry `entry` from memory to disk; the file names its tenant and exact tokens,
    so it is restored only for the same tokens, and after a restart only for the same model."""

    entry: int
    tenant: str
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class CompactKv:
    """After the other moves, before the batch: pack every sequence's cells from the pool's
    start, so the range the batch's attention spans is only the cells in use."""


@dataclass(frozen=True)
class ShareKv:
    """After a restore into `seq_id`: its cells for positions [0, n_tokens) are replaced by
    `source`'s, which holds the same tokens there (the cells are then shared, not copied)."""

    seq_id: int
    source: int
    n_tokens: int


@dataclass(frozen=True)
class SaveSpan:
    """Before the batch: keep `seq_id`'s cells at positions [start, start + n_tokens) (a passage
    just computed after its anchor) as passage entry `entry` (`inference.passages`)."""

    seq_id: int
    entry: int
    start: int
    n_tokens: int


@dataclass(frozen=True)
class PlaceSpan:
    """Before the batch: passage entry `entry`'s cells from its `offset`-th token on, `n_tokens`
    of them, put into `seq_id` at positions [at, at + n_tokens), their keys rotated by the
    distance from where they were computed. The sequence holds exactly the positions before
    `at`; the batch computes from `at + n_tokens` on."""

    seq_id: int
    entry: int
    offset: int
    at: int
    n_tokens: int


@dataclass(frozen=True)
class SpillSpan:
    """Move passage entry `entry` from memory to disk; the file names its tenant, key, tokens
    and the position it was computed at."""

    entry: int
    tenant: str
    key: str
    tokens: tuple[int, ...]
    start: int


@dataclass(frozen=True)
class DropSpan:
    """Free passage entry `entry` (in memory or on disk)."""

    entry: int


KvAction = (
    KvOp
    | SaveKv
    | RestoreKv
    | DropSaved
    | SpillSaved
    | CompactKv
    | ShareKv
    | SaveSpan
    | PlaceSpan
    | SpillSpan
    | DropSpan
)


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

    @property
    def wants_logits(self) -> bool:
        """The chunk ends the prompt of a request that samples (a passage computed once does
        not: its KV is all it is for)."""
        return self.completes_prompt and not self.request.prefill_only


@dataclass
class SchedulerOutput:
    kv_ops: list[KvAction] = field(default_factory=list)
    decodes: list[DecodeItem] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)  # started this step

    @property
    def num_tokens(self) -> int:
        return len(self.decodes) + sum(len(c.tokens) for c in self.prefills)

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills

    def sampling_requests(self) -> list[Request]:
        """Requests that get a next token from this batch, in batch order."""
        return [d.request for d in self.decodes] + [
            c.request for c in self.prefills if c.wants_logits
        ]


class Scheduler:
    def __init__(
        self,
        *,
        n_seq_max: int,
        kv_capacity: int,
        max_batch_tokens: int,
        max_queue: int,
        policy: str = "fair",
        max_running: int | None = None,
        aging: float = 30.0,
        host_cache_tokens: int = 0,
        host_disk_tokens: int = 0,
        park_idle_steps: int = 0,
        compact: bool = True,
        shared_pool: bool = True,
        max_prefill_backlog: int | None = None,
        span_cache_tokens: int = 0,
        span_disk_tokens: int = 0,
        span_recompute: int = 0,
    ) -> None:
        if max_batch_tokens < n_seq_max:
            raise ValueError("max_batch_tokens must hold one decode token per sequence")
        self.slots = [Slot(seq_id=i) for i in range(n_seq_max)]
        self.kv_capacity = kv_capacity
        self.max_batch_tokens = max_batch_tokens
        # How many requests run together: the engine lowers or raises it (the speed floor).
        self.max_running = min(max_running or n_seq_max, n_seq_max)
        # Prompt tokens one step may carry: the engine lowers it while streams decode.
        self.prompt_budget = max_batch_tokens
        # A long prompt waits in the queue while the prompts being computed leave this many
        # tokens or more (`_admit_waiting`).
        self.max_prefill_backlog = max_prefill_backlog or max_batch_tokens
        # Of those, background work's: the engine keeps it to about one decode step's time.
        self.background_prompt_budget = max_batch_tokens
        self.waiting = WaitingQueue(max_queue, policy, aging=aging)
        self.host = (
            HostCache(host_cache_tokens, disk_capacity_tokens=host_disk_tokens)
            if host_cache_tokens > 0
            else None
        )
        # Idle sequences' KV goes to host memory after this many steps (0: kept in place until
        # the sequence is taken): every token of every step attends over every cell in
        # llama.cpp's pool, masked or not, so idle conversations kept in sequences slow every
        # running stream (`QASSIST_PARK_IDLE_STEPS`, 10 by default: about a second).
        self.park_idle_steps = park_idle_steps if self.host is not None else 0
        self.running: list[Request] = []
        self._requests: dict[str, Request] = {}
        self._pending_ops: list[KvAction] = []
        self._step = 0
        # One pool of cells for all sequences (llama.cpp's unified KV), where a copied prefix
        # is shared cells; else a stream of cells per sequence, where a copy is a copy, and a
        # run of consecutive sequence ids decodes in one pass.
        self.shared_pool = shared_pool
        self.compact = compact and shared_pool  # pack the pool when freed cells leave holes
        self._freed = 0  # cells freed since the pool was last packed (shared ones included)
        self.compactions = 0
        # Passages' KV computed once and placed where a prompt carries them (None: off).
        self.spans = (
            SpanCache(span_cache_tokens, disk_capacity_tokens=span_disk_tokens)
            if span_cache_tokens > 0
            else None
        )
        # The first tokens of each placed passage computed again, in place (they attend to the
        # passages before them, which its precomputed KV never saw).
        self.span_recompute = max(0, span_recompute)
        self.warmed: list[Request] = []  # passages computed once and saved by the last update

    @property
    def n_seq_max(self) -> int:
        return len(self.slots)

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

    def expire(self, cutoff: float) -> list[Request]:
        """End the waiting requests that arrived before `cutoff` (the wait bound): the caller
        tells their clients "busy" rather than leave them waiting."""
        expired = self.waiting.older_than(cutoff)
        for request in expired:
            self.finish(request, FinishReason.ERROR)
        return expired

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
        return max(0, self.max_running - len(self.running))

    # --- one step ----------------------------------------------------------------------------

    def schedule(self, now: float | None = None) -> SchedulerOutput:
        now = time.monotonic() if now is None else now
        self._step += 1
        out = SchedulerOutput(kv_ops=self._pending_ops)
        self._pending_ops = []
        budget = self.max_batch_tokens
        self._park_idle(out)
        self._pack_running(out)

        for req in self.running:
            if req.prefill_done and req.output_tokens:
                assert req.seq_id is not None
                out.decodes.append(
                    DecodeItem(req, req.seq_id, req.output_tokens[-1], req.num_tokens - 1)
                )
                budget -= 1

        self._admit_waiting(out, budget, now)

        # Replies' prompts before background work's; short ones (a turn's new message) before
        # long ones, then in order of admission. Background prompts go in small chunks: a reply
        # arriving mid-step waits for the step to end.
        batch_room = budget
        budget = min(budget, self.prompt_budget)
        background_budget = self.background_prompt_budget
        extra = SHORT_PROMPT  # tokens of short prompts a step may carry beyond the budget

        for req in self.running:
            if not req.prefill_done:
                self._place_spans(req, out)

        def short(r: Request) -> bool:  # all it computes is a turn's new message
            placeable = self._placeable(r, r.num_computed)
            return len(r.prompt_tokens) - r.num_cached - placeable <= SHORT_PROMPT

        short_waits = False  # a short prompt did not fit whole: later ones do not jump it
        for req in sorted(self.running, key=lambda r: (r.background, not short(r))):
            # Up to the next passage to place: it goes in at the next step, after this chunk.
            left = self._next_stop(req) - req.num_computed
            room = min(budget, background_budget) if req.background else budget
            if not req.background and short(req) and left > 0 and room < left:
                if not short_waits and left <= max(room, 0) + extra:
                    # A turn's new message (and the template around it) in one step even
                    # beside running streams: they get one longer step, the person asking gets
                    # their first token several steps sooner than in budget-sized chunks.
                    extra -= left - max(room, 0)
                    room = min(left, batch_room)
                else:
                    # In admission (fair) order: another tenant's cheaper prompts, admitted
                    # in the same step, must not take every first token before this one's.
                    short_waits = True
            if room <= 0:
                continue
            if not req.prefill_done:
                n = min(room, left)
                start = req.num_computed
                assert req.seq_id is not None
                tokens = req.prompt_tokens[start : start + n]
                out.prefills.append(PrefillChunk(req, req.seq_id, start, tokens))
                budget -= n
                batch_room -= n
                if req.background:
                    background_budget -= n
        if any(not chunk.request.background for chunk in out.prefills):
            # A reply's prompt is being computed: background work sits this step out (its
            # decodes and its prompt chunks), so the step is as short as it can be and the
            # reply's first token comes sooner. It loses one step; nobody waits on it.
            out.decodes = [d for d in out.decodes if not d.request.background]
            out.prefills = [c for c in out.prefills if not c.request.background]
        self._compact_if_fragmented(out)
        return out

    def _admit_waiting(self, out: SchedulerOutput, budget: int, now: float) -> None:
        """Admit waiting requests in the queue's order while sequences and KV room last. A
        long prompt (more than SHORT_PROMPT tokens to compute) is admitted only while the
        prompts being computed leave less than `max_prefill_backlog` tokens: prompts are
        computed one after another anyway (oldest first), and one admitted early only brings
        its conversation's KV into the pool, where every token of every step attends over it
        (measured: a prompt token cost 20 ms with sixteen conversations of passages waiting
        there, 4-6 ms in a small pool). While it waits, a short prompt behind it (a turn's new
        message) is admitted: it is computed within a step."""
        if budget <= 0:
            return
        backlog = self.prefill_backlog()
        passed: set[str] = set()  # long prompts left waiting this step
        while len(self.running) < self.max_running:
            # The order again after each admission: it charged its tenant's fair share.
            req = next((r for r in self.waiting.ordered(now) if r.request_id not in passed), None)
            if req is None:
                return
            if req.background and not self._room_for_background():
                return  # background work waits for a quiet moment; it never slows a reply
            if backlog >= self.max_prefill_backlog and self.uncached_estimate(req) > SHORT_PROMPT:
                passed.add(req.request_id)
                continue
            if not self._admit(req, out):
                return  # not enough KV room yet: it waits, and nobody behind it jumps it
            self.waiting.take(req)
            req.admitted_at = now
            out.admitted.append(req)
            if not req.background:
                backlog += self.to_compute(req)

    def prefill_backlog(self) -> int:
        """Prompt tokens still to compute of the replies admitted (background work aside)."""
        return sum(
            self.to_compute(r) for r in self.running if not r.background and not r.prefill_done
        )

    def to_compute(self, req: Request) -> int:
        """Prompt tokens `req` still has to compute: what is not in its sequence yet, less what
        precomputed passage KV will place."""
        return len(req.prompt_tokens) - req.num_computed - self._placeable(req, req.num_computed)

    # --- passage KV computed once (inference.passages) -----------------------------------------

    def _placement_point(self, req: Request, span: Span) -> int | None:
        """Where `span`'s precomputed KV would go in (after the tokens computed again at its
        start), or None when it cannot be placed: nothing kept for it, nothing left to place,
        or nothing of the prompt after it (the last prompt token is always computed)."""
        if self.spans is None or span.end >= len(req.prompt_tokens):
            return None
        at = span.start + self.span_recompute
        if at >= span.end or self.spans.get(req.tenant, span.key) is None:
            return None
        return at

    def _placeable(self, req: Request, start: int) -> int:
        """Tokens from position `start` on that placing precomputed passages will fill."""
        total = 0
        for span in req.spans:
            at = self._placement_point(req, span)
            if at is not None and at >= start:
                total += span.end - at
        return total

    def _placement_cut(self, req: Request, reused: int) -> int:
        """How much of a `reused` prefix to take: up to the placement point of a passage it
        ends inside, past which the passage's kept KV would otherwise not be placed and the
        rest of it would be computed. Passages of one document begin alike (its title), so a
        question's first passage often shares its first tokens with another question's: with
        no tokens recomputed, that turned 17 % of the passage tokens back into computed ones
        (docs/BENCHMARKS.md, #35, one employee alone)."""
        for span in req.spans:
            at = self._placement_point(req, span)
            if at is not None and at < reused < span.end:
                return at
        return reused

    def _next_stop(self, req: Request) -> int:
        """Where `req`'s next prompt chunk must end: the next passage to place, or the end."""
        for span in req.spans:
            at = self._placement_point(req, span)
            if at is not None and at > req.num_computed:
                return at
        return len(req.prompt_tokens)

    def _place_spans(self, req: Request, out: SchedulerOutput) -> None:
        """Place the passages whose turn it is: the sequence holds the positions before them
        (placing moves no token the batch computes: the chunk after goes in this step)."""
        assert self.spans is not None or not req.spans
        for span in req.spans:
            at = self._placement_point(req, span)
            if at is None or at < req.num_computed:
                continue  # computed in place, or already in the sequence (a copied prefix)
            if at > req.num_computed:
                return  # the tokens before it are computed first
            assert self.spans is not None
            assert req.seq_id is not None
            entry = self.spans.get(req.tenant, span.key)
            assert entry is not None
            n = span.end - at
            out.kv_ops.append(PlaceSpan(req.seq_id, entry.entry_id, at - span.start, at, n))
            self.spans.touch(entry, self._step)
            req.num_computed += n
            req.num_cached += n
            req.num_placed += n

    def _finish_warm(self, req: Request) -> None:
        """A passage computed after its anchor: its cells are kept (`SaveSpan`, before the next
        batch), the sequence keeps the anchor only (a prefix the next one shares)."""
        span = req.warm
        assert span is not None
        assert req.seq_id is not None
        assert self.spans is not None
        saved = self.spans.save(
            req.tenant, span.key, req.prompt_tokens[span.start : span.end], span.start, self._step
        )
        self._pending_ops.extend(DropSpan(d) for d in saved.dropped)
        self._pending_ops.extend(
            SpillSpan(e.entry_id, e.tenant, e.key, tuple(e.tokens), e.start) for e in saved.spilled
        )
        if saved.entry_id is not None:
            self._pending_ops.append(SaveSpan(req.seq_id, saved.entry_id, span.start, span.length))
        self.running.remove(req)
        slot = self.slots[req.seq_id]
        slot.request = None
        slot.last_used = self._step
        slot.tokens = req.prompt_tokens[: span.start]
        self._pending_ops.append(KvOp(req.seq_id, keep=span.start))
        self._freed += span.length
        req.finish(FinishReason.STOP)
        del self._requests[req.request_id]
        self.warmed.append(req)

    def forget_spans(self, tenant: str, live: set[str]) -> int:
        """Drop the tenant's passages that are no longer in its documents; how many."""
        if self.spans is None:
            return 0
        gone = self.spans.prune(tenant, live)
        self._pending_ops.extend(DropSpan(e) for e in gone)
        return len(gone)

    def adopt_span(self, tenant: str, key: str, tokens: list[int], start: int) -> int | None:
        """Take in a passage an earlier run left on disk; its entry id, or None."""
        if self.spans is None:
            return None
        return self.spans.adopt(tenant, key, tokens, start)

    def take_pending(self) -> SchedulerOutput:
        """KV moves decided outside a step (passages dropped while the engine is idle)."""
        out = SchedulerOutput(kv_ops=self._pending_ops)
        self._pending_ops = []
        return out

    def pending_prefill(self) -> int:
        """The prefill backlog with the waiting replies' prompts (what they would compute)."""
        waiting = sum(self.uncached_estimate(r) for r in self.waiting if not r.background)
        return self.prefill_backlog() + waiting

    @property
    def prefill_full(self) -> bool:
        """Whether a long prompt would wait for the prompts being computed (`_admit_waiting`)."""
        return self.prefill_backlog() >= self.max_prefill_backlog

    def uncached_estimate(self, req: Request) -> int:
        """Tokens of `req`'s prompt that admitting it now would leave to compute: those beyond
        the longest prefix a sequence or host memory holds for its tenant."""
        usable = max(0, len(req.prompt_tokens) - 1)
        held = [
            s.request.kv_tokens() if s.request is not None else s.tokens
            for s in self.slots
            if s.tenant == req.tenant
        ]
        cached = max((common_prefix_len(h, req.prompt_tokens) for h in held), default=0)
        if self.host is not None:
            cached = max(cached, self.host.match(req.tenant, req.prompt_tokens, usable)[1])
        cached = min(cached, usable)
        return len(req.prompt_tokens) - cached - self._placeable(req, cached)

    def _compact_if_fragmented(self, out: SchedulerOutput) -> None:
        """Pack the pool when at least as many cells have been freed since it was last packed
        as are in use now (and `COMPACT_MIN_FREED`): llama.cpp fills holes from the bottom, but
        a running sequence's newest cells sit at the top until it ends. Packing copies the
        cells in use twice (about 10 µs a cell on a 2-core EPYC): a step's worth of time now
        and then, against every later step visiting the holes."""
        if not self.compact or out.is_empty or self._freed < COMPACT_MIN_FREED:
            return
        in_use = sum(r.num_computed + len(r.output_tokens) for r in self.running)
        in_use += sum(len(s.tokens) for s in self.slots if s.request is None)
        if self._freed >= in_use:
            out.kv_ops.append(CompactKv())
            self._freed = 0
            self.compactions += 1

    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Record what the batch computed; return the requests that got a new token."""
        self.warmed = []
        for chunk in out.prefills:
            chunk.request.num_computed = chunk.start + len(chunk.tokens)
            if chunk.request.prefill_only and chunk.request.prefill_done:
                self._finish_warm(chunk.request)
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

        def shared(held: list[int], tenant: str) -> int:
            # KV is reused only within a tenant: a hit on another tenant's prefix would show
            # in the time to first token and reveal that tenant's opening text.
            if tenant != req.tenant:
                return 0
            return self._placement_cut(req, min(common_prefix_len(held, req.prompt_tokens), usable))

        def continues(slot: Slot) -> int:
            # A kept conversation is taken over only by its own next turn: when the request
            # continues what it holds and (almost) nothing of it is lost. Any other shared
            # prefix (a tenant's system prompt, an edited turn's history) is copied into
            # another sequence — llama.cpp shares the cells, so the copy costs nothing — and
            # the conversation stays whole for its own next turn, instead of going to host
            # memory and coming back as a restore whose cells are no longer shared.
            n = shared(slot.tokens, slot.tenant)
            return n if n and len(slot.tokens) - n <= TAKEOVER_SLACK else 0

        if self.shared_pool:
            # The request's own conversation first; else an empty sequence before evicting a
            # kept cache; else the least recently used cache.
            target = max(free, key=lambda s: (continues(s), not s.tokens, -s.last_used))
        else:
            # The lowest free sequence, so running ones stay consecutive (one pass a step);
            # a conversation kept in another sequence is copied over (`source` below).
            target = min(free, key=lambda s: s.seq_id)
        keep = shared(target.tokens, target.tenant)
        source, copy_len = None, 0
        for slot in self.slots:
            if slot is target:
                continue
            held = slot.request.kv_tokens() if slot.request is not None else slot.tokens
            n = shared(held, slot.tenant)
            if n > max(keep, copy_len):
                source, copy_len = slot, n
        saved, restore_len = None, 0
        share, share_len = None, 0  # whose cells a restored prefix is swapped for
        if self.host is not None:
            saved, n = self.host.match(req.tenant, req.prompt_tokens, usable)
            n = self._placement_cut(req, n)
            if saved is not None and n > max(keep, copy_len) + MIN_RESTORE_GAIN:
                restore_len = n
                if self.shared_pool and source is not None and copy_len >= MIN_SHARE:
                    share, share_len = source, copy_len
                source, copy_len, keep = None, 0, 0
            else:
                saved = None

        peak = max(self._reserve(req), len(saved.tokens) if saved is not None else 0)
        need = peak - len(target.tokens)
        evictable = sorted(
            (s for s in free if s not in (target, source, share) and s.tokens),
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

        # What is about to be lost goes to host memory first: the evicted caches, and the
        # target's own history beyond the prefix this request keeps.
        losing = list(evictions)
        target_keeps = keep if saved is None and source is None else 0
        if target.tokens and target_keeps < len(target.tokens):
            losing.append(target)
        for slot in losing:
            self._save(slot, out, pinned=saved.entry_id if saved is not None else None)
        for victim in evictions:
            self._free(victim, out)
        self._freed += len(target.tokens) - target_keeps

        if saved is not None:
            out.kv_ops.append(RestoreKv(target.seq_id, saved.entry_id, len(saved.tokens)))
            out.kv_ops.append(KvOp(target.seq_id, restore_len))
            if share is not None:
                # The restored copy of a prefix another sequence holds (a tenant's system
                # prompt) gives way to that sequence's cells: one set of cells for both.
                out.kv_ops.append(ShareKv(target.seq_id, share.seq_id, share_len))
                self._freed += share_len
            saved.last_used = self._step
            req.num_computed = req.num_cached = req.num_restored = restore_len
        elif source is not None:
            out.kv_ops.append(KvOp(target.seq_id, 0, source.seq_id, copy_len))
            req.num_computed = req.num_cached = copy_len
        else:
            out.kv_ops.append(KvOp(target.seq_id, keep))
            req.num_computed = req.num_cached = keep
        target.tokens = req.prompt_tokens[: req.num_computed]
        target.request = req
        target.tenant = req.tenant
        target.last_used = self._step
        req.seq_id = target.seq_id
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        return True

    def _pack_running(self, out: SchedulerOutput) -> None:
        """With a stream per sequence, llama.cpp decodes each run of consecutive sequence ids
        in a pass of its own (47 streams around one idle sequence: 310 ms a step against 260
        for 48 in a row). Admissions take the lowest free sequence; the gaps they will not fill
        this step are closed by moving the highest running request down (a copy of its KV, a
        few ms)."""
        if self.shared_pool:
            return
        admissible = min(len(self.waiting), max(0, self.max_running - len(self.running)))
        while self.running:
            top = max(self.running, key=lambda r: r.seq_id or 0)
            assert top.seq_id is not None
            gaps = [s for s in self.slots[: top.seq_id] if s.request is None]
            # A finished conversation kept in a gap goes to host memory first; without host
            # memory only empty sequences are taken (the conversation is worth more).
            usable = gaps if self.host is not None else [s for s in gaps if not s.tokens]
            if len(gaps) <= admissible or not usable:
                return
            low, high = min(usable, key=lambda s: s.seq_id), self.slots[top.seq_id]
            if low.tokens:
                self._save(low, out, pinned=None)  # unless host memory holds it already
            held = top.kv_tokens()
            out.kv_ops.append(KvOp(low.seq_id, 0, high.seq_id, len(held)))
            out.kv_ops.append(KvOp(high.seq_id, 0))
            low.tokens, low.tenant, low.last_used = high.tokens, high.tenant, high.last_used
            low.request, high.request, high.tokens = top, None, []
            top.seq_id = low.seq_id

    def _save(self, slot: Slot, out: SchedulerOutput, *, pinned: int | None) -> None:
        if self.host is None or not self.host.worth_saving(slot.tenant, slot.tokens):
            return
        saved = self.host.save(slot.tenant, slot.tokens, self._step, pinned=pinned)
        out.kv_ops.extend(DropSaved(d) for d in saved.dropped)
        out.kv_ops.extend(SpillSaved(e.entry_id, e.tenant, tuple(e.tokens)) for e in saved.spilled)
        if saved.entry_id is not None:
            out.kv_ops.append(SaveKv(slot.seq_id, saved.entry_id, len(slot.tokens)))

    def _park_idle(self, out: SchedulerOutput) -> None:
        """Move the KV of sequences idle for `park_idle_steps` to host memory and free their
        cells. A conversation's next turn restores it (a copy of a few megabytes) instead of
        every step of every stream attending over it meanwhile. One host memory cannot hold
        stays where it is."""
        if self.park_idle_steps <= 0:
            return
        assert self.host is not None
        for slot in self.slots:
            if (
                slot.request is None
                and slot.tokens
                and self._step - slot.last_used >= self.park_idle_steps
                and len(slot.tokens) <= self.host.capacity_tokens
            ):
                self._save(slot, out, pinned=None)  # unless host memory holds it already
                self._free(slot, out)

    def _free(self, slot: Slot, out: SchedulerOutput) -> None:
        """Drop what an idle sequence keeps (saved first by the caller, where worth it)."""
        self._freed += len(slot.tokens)
        slot.tokens = []
        out.kv_ops.append(KvOp(slot.seq_id, 0))

    def pool_lost(self) -> None:
        """The runner lost every sequence's KV (the requests were ended by the caller): no
        sequence holds anything any more."""
        for slot in self.slots:
            slot.tokens = []
        self._freed = 0

    def persist(self) -> SchedulerOutput:
        """Before a shutdown: the conversations kept in idle sequences and in host memory go to
        disk (within its budget), so the next run of the same model finds them warm. KV moves
        only; nothing is decoded."""
        out = SchedulerOutput(kv_ops=self._pending_ops)
        self._pending_ops = []
        if self.host is None or self.host.disk_capacity_tokens <= 0:
            return out
        for slot in sorted(self.slots, key=lambda s: -s.last_used):
            if slot.request is None and slot.tokens:
                self._save(slot, out, pinned=None)
        moved = self.host.spill_all()
        out.kv_ops.extend(DropSaved(d) for d in moved.dropped)
        out.kv_ops.extend(SpillSaved(e.entry_id, e.tenant, tuple(e.tokens)) for e in moved.spilled)
        return out

    def adopt_saved(self, tenant: str, tokens: list[int]) -> int | None:
        """Take in a conversation an earlier run left on disk; its host entry id, or None."""
        if self.host is None:
            return None
        return self.host.adopt(tenant, tokens, self._step)

    def restore_failed(self, seq_id: int, entry: int) -> Request | None:
        """The runner could not restore `entry` into `seq_id` (a file gone or not matching), or
        copy another sequence's KV into it (`entry` is `NO_ENTRY`): the batch did not run. The
        request computes its whole prompt instead (nothing was sampled from the failed state),
        the entry is forgotten."""
        if self.spans is not None and entry in self.spans:
            self.spans.discard(entry)
            self._pending_ops.append(DropSpan(entry))
        elif self.host is not None and entry != NO_ENTRY:
            self.host.discard(entry)
            self._pending_ops.append(DropSaved(entry))
        slot = self.slots[seq_id]
        slot.tokens = []
        self._pending_ops.append(KvOp(seq_id, keep=0))
        req = slot.request
        if req is None:
            return None
        req.num_computed = req.num_cached = req.num_restored = req.num_placed = 0
        return req
