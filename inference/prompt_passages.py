"""The engine's side of passage KV computed once (`inference.passages` holds what is kept).

Where a prompt's passages are and the keys of their KV; the documents' index's passages taken
in; and the engine's own background requests that compute a passage's KV after its anchor.
Pure logic: the runner (tokeniser, template) and the scheduler are the engine's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inference.passages import MIN_SPAN_TOKENS, WarmJob, WarmQueue, span_key
from inference.scheduler import PlaceSpan, Scheduler, SchedulerOutput
from inference.stats import EngineStats
from inference.types import ChatMessage, PromptPart, Request, SamplingParams, Span

if TYPE_CHECKING:
    from inference.engine import Runner

logger = logging.getLogger(__name__)

WARM_PREFIX = "passage-kv-"  # ids of the engine's own requests that compute a passage's KV
WARM_AT_ONCE = 2  # such requests queued or running at once (background: on spare sequences)
SYNC_SECONDS = 10.0  # an idle engine asks the documents' index for new passages this often

# Where a user message's passages are: (start, end) character offsets in its content.
PassageFinder = Callable[[str], Sequence[tuple[int, int]]]


@dataclass(frozen=True)
class PassageSet:
    """A tenant's passages as its documents' index lists them (`PassageSource`): the opening
    messages questions about them start with, the texts to compute (the knowledge base's, most
    useful first) and every text still in use (attachments too); what is not is dropped."""

    tenant: str
    version: int
    opening: tuple[ChatMessage, ...]
    warm: tuple[str, ...]
    live: tuple[str, ...]


# The index's passages of the tenants whose documents changed since the versions given.
PassageSource = Callable[[dict[str, int]], Sequence[PassageSet]]


class PromptPassages:
    """Passages in prompts, and the passages' KV to compute. Off (`on` false: no finder, or a
    scheduler that keeps no passages) it marks nothing and computes nothing."""

    def __init__(
        self,
        runner: Runner,
        scheduler: Scheduler,
        stats: EngineStats,
        find: PassageFinder | None = None,
        source: PassageSource | None = None,
    ) -> None:
        self.runner = runner
        self.scheduler = scheduler
        self.stats = stats
        self.find = find
        self.source = source
        self.queue = WarmQueue()
        self.computing: dict[str, WarmJob] = {}  # request id -> the passage it computes
        self._ids = itertools.count(1)
        self.synced: dict[str, int] = {}  # tenant -> the index version last taken in
        self.last_sync = float("-inf")

    @property
    def queued(self) -> int:
        """Passages waiting to be computed or being computed."""
        return len(self.queue) + len(self.computing)

    # --- a prompt's passages ------------------------------------------------------------------

    def mark(
        self, messages: Sequence[ChatMessage], parts: list[PromptPart]
    ) -> tuple[list[PromptPart], int]:
        """The prompt's parts with each user message's passages (as `find` finds them) made
        parts of their own, and where the first user message's content starts (the parts
        before it are the anchor every passage's KV is computed after)."""
        if self.find is None:
            return parts, 0
        contents = [m for m in messages if m.content]  # the untrusted parts, in order
        if len(contents) != sum(not p.trusted for p in parts):
            return parts, 0  # a template that splits contents: no passages then
        out: list[PromptPart] = []
        first_user = -1
        i = 0
        for part in parts:
            if part.trusted:
                out.append(part)
                continue
            message = contents[i]
            i += 1
            if message.role != "user":
                out.append(part)
                continue
            if first_user < 0:
                first_user = len(out)
            at = 0
            for start, end in self.find(part.text):
                if not at <= start < end <= len(part.text):
                    break  # not in order: the rest stays text
                if start > at:
                    out.append(PromptPart(part.text[at:start], False))
                out.append(PromptPart(part.text[start:end], False, passage=True))
                at = end
            if at < len(part.text):
                out.append(PromptPart(part.text[at:], False))
        return out, max(first_user, 0)

    def tokenize(
        self, parts: Sequence[PromptPart], *, continuation: bool, offset: int
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Tokens of `parts` and where their passages are in them ((start, length), counted
        from `offset`). Every part is tokenised on its own anyway (trust differs between
        them); a passage then has the same tokens in every prompt."""
        if not any(p.passage for p in parts):
            return self.runner.tokenize_parts(parts, continuation=continuation), []
        tokens: list[int] = []
        spans: list[tuple[int, int]] = []
        for i, part in enumerate(parts):
            more = self.runner.tokenize_parts([part], continuation=continuation or i > 0)
            if part.passage and len(more) >= MIN_SPAN_TOKENS:
                spans.append((offset + len(tokens), len(more)))
            tokens += more
        return tokens, spans

    def keyed(
        self,
        anchor_parts: Sequence[PromptPart],
        prompt: list[int],
        found: list[tuple[int, int]],
        tenant: str,
    ) -> tuple[list[Span], int]:
        """The prompt's passages with the keys of their KV, and the anchor's length; those not
        kept are queued to be computed once (people are asking about them now), and are
        computed in place meanwhile."""
        if not found or self.scheduler.spans is None:
            return [], 0
        anchor = self.runner.tokenize_parts(anchor_parts) if anchor_parts else []
        if not anchor or prompt[: len(anchor)] != anchor:
            return [], 0
        spans = [
            Span(start, length, span_key(anchor, prompt[start : start + length]))
            for start, length in found
            if start >= len(anchor)
        ]
        self.queue_missing(tenant, prompt, len(anchor), spans)
        return spans, len(anchor)

    def queue_missing(self, tenant: str, prompt: list[int], anchor: int, spans: list[Span]) -> None:
        """Queue the passages not kept to be computed once (people are asking about them now:
        ahead of what the index lists); they are computed in place meanwhile."""
        assert self.scheduler.spans is not None
        for span in spans:
            if self.scheduler.spans.get(tenant, span.key) is None:
                tokens = tuple(prompt[span.start : span.end])
                job = WarmJob(tenant, span.key, tuple(prompt[:anchor]), tokens)
                self.queue.push(job, urgent=True)

    def count_placed(self, out: SchedulerOutput) -> None:
        """Passage tokens of this step's prompts: placed from precomputed KV, or computed."""
        placed = sum(op.n_tokens for op in out.kv_ops if isinstance(op, PlaceSpan))
        self.stats.placed_tokens += placed
        self.stats.cached_tokens += placed
        for chunk in out.prefills:
            end = chunk.start + len(chunk.tokens)
            for span in chunk.request.spans:
                overlap = min(end, span.end) - max(chunk.start, span.start)
                if overlap > 0:
                    self.stats.passage_tokens_computed += overlap

    # --- the index's passages -----------------------------------------------------------------

    def adopt_files(self) -> None:
        """Passages an earlier run of this model computed come back (the files of a model or
        layout of another fingerprint were never found: `inference.kvdisk`)."""
        adopted = 0
        for tenant, key, tokens, start, name in self.runner.span_files():
            entry = self.scheduler.adopt_span(tenant, key, tokens, start)
            self.runner.bind_span_file(name, entry)
            adopted += entry is not None
        if adopted:
            logger.info("%d passages' KV found on disk", adopted)

    def sync_if_due(self, now: float | None = None) -> None:
        """Take in the passages the documents' index lists, at most every `SYNC_SECONDS`."""
        now = time.monotonic() if now is None else now
        if self.source is None or now - self.last_sync < SYNC_SECONDS:
            return
        self.last_sync = now
        try:
            self.sync(self.source(dict(self.synced)))
        except Exception:  # the index is a hint: the next sync tries again
            logger.exception("listing the documents' passages failed")

    def sync(self, sets: Sequence[PassageSet]) -> None:
        """The index's passages of tenants whose documents changed: those not kept are queued
        to be computed, those no document holds any more are dropped (with their files)."""
        spans = self.scheduler.spans
        assert spans is not None
        for item in sets:
            parts = self.runner.render_prompt([*item.opening, ChatMessage("user", "x")])
            content = max(i for i, p in enumerate(parts) if not p.trusted)
            anchor = self.runner.tokenize_parts(parts[:content]) if content else []

            def key(text: str, anchor: list[int] = anchor) -> tuple[str, list[int]]:
                part = PromptPart(text, False, passage=True)
                tokens = self.runner.tokenize_parts([part], continuation=True)
                return span_key(anchor, tokens), tokens

            live = {key(text)[0] for text in item.live}
            dropped = self.scheduler.forget_spans(item.tenant, live)
            self.queue.drop_tenant(item.tenant, live)
            queued = 0
            for text in item.warm:
                k, tokens = key(text)
                if len(tokens) < MIN_SPAN_TOKENS or spans.get(item.tenant, k):
                    continue
                queued += self.queue.push(WarmJob(item.tenant, k, tuple(anchor), tuple(tokens)))
            self.synced[item.tenant] = item.version
            logger.info(
                "passages of %s: %d in its documents, %d queued to compute, %d dropped",
                item.tenant or "(no tenant)",
                len(live),
                queued,
                dropped,
            )

    # --- the engine's own requests ------------------------------------------------------------

    def start(self) -> None:
        """Queue the next passages to compute as the engine's own background requests: a few
        at a time, so they never fill the queue that replies wait in."""
        scheduler = self.scheduler
        if scheduler.spans is None:
            return
        while len(self.computing) < WARM_AT_ONCE and len(scheduler.waiting) < (
            scheduler.waiting.max_size // 2
        ):
            job = self.queue.pop()
            if job is None:
                return
            if scheduler.spans.get(job.tenant, job.key) is not None:
                continue
            request = Request(
                f"{WARM_PREFIX}{next(self._ids)}",
                [*job.anchor, *job.tokens],
                SamplingParams(max_tokens=1, temperature=0.0),
                background=True,
                tenant=job.tenant,
                warm=Span(len(job.anchor), len(job.tokens), job.key),
            )
            if not scheduler.add(request):
                self.queue.push(job, urgent=True)
                return
            self.computing[request.request_id] = job

    def take_computed(self) -> None:
        """Count the passages whose KV the last step finished computing (and kept)."""
        for request in self.scheduler.warmed:
            if self.computing.pop(request.request_id, None) is not None:
                self.stats.passages_computed += 1
        self.scheduler.warmed = []

    def drop(self, request_id: str) -> WarmJob | None:
        """Forget one of the engine's own requests (ended early); its passage, if it was one."""
        return self.computing.pop(request_id, None)
