"""The engine step: schedule, execute on the runner, update, then turn tokens into events.

Pure Python. The runner is injected: `inference.runner.LlamaRunner` in production, a fake in tests.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from inference.kept_text import KeptTexts
from inference.output import TextStream
from inference.prompt_passages import PassageFinder, PassageSet, PassageSource, PromptPassages
from inference.scheduler import DropSpan, Scheduler, SchedulerOutput, SpillSpan
from inference.speed import SpeedGovernor
from inference.stats import EngineStats
from inference.types import (
    ChatMessage,
    Constraint,
    Delta,
    Done,
    EngineError,
    ErrorCode,
    Event,
    Failed,
    FinishReason,
    KvPoolLost,
    PromptPart,
    Request,
    RestoreFailed,
    SamplingParams,
    TokenLogprobs,
    failed,
    prompt_text,
)
from inference.waits import Waits

logger = logging.getLogger(__name__)

# The worker's work between two steps counted as part of the streams' wait, at most this long
# (longer is a stall: a garbage collection, a slow Redis, not the cost of a step).
MAX_LOOP_GAP = 0.1


class Runner(Protocol):
    n_seq_max: int
    n_ctx: int
    max_seq_tokens: int
    kv_unified: bool  # one pool of cells for all sequences, or a stream per sequence
    last_decode_seconds: float
    kv_bytes_per_token: int  # host memory one token's KV takes when saved
    # After `execute`: the sampled tokens' logprobs, for the requests that asked for them.
    last_logprobs: dict[str, TokenLogprobs]
    grammar_tokens: int  # tokens sampled under a grammar
    grammar_resamples: int  # of those, the ones a grammar rejected and that were sampled again
    # A constrained request's grammar may take this long in one step (0: unbounded); after
    # `execute`, the seconds each constrained request's grammar took in it.
    grammar_step_seconds: float
    last_grammar_seconds: dict[str, float]
    passage_kv: bool  # the runner can place passage KV at other positions (`PlaceSpan`)

    @property
    def saved_bytes(self) -> int: ...  # host memory held by saved sequences now
    @property
    def disk_bytes(self) -> int: ...  # disk held by saved sequences now

    @property
    def span_bytes(self) -> int: ...  # host memory held by passages' KV
    @property
    def span_disk_bytes(self) -> int: ...  # disk held by passages' KV

    def disk_entries(self) -> list[tuple[str, list[int], str]]: ...  # (tenant, tokens, key)
    def bind_disk_entry(self, key: str, entry: int | None) -> None: ...
    # Passages an earlier run left on disk: (tenant, key, tokens, start, file name).
    def span_files(self) -> list[tuple[str, str, list[int], int, str]]: ...
    def bind_span_file(self, name: str, entry: int | None) -> None: ...

    def render_prompt(self, messages: Sequence[ChatMessage]) -> list[PromptPart]: ...
    def tokenize_parts(
        self, parts: Sequence[PromptPart], *, continuation: bool = False
    ) -> list[int]: ...
    def token_bytes(self, token: int) -> bytes: ...
    def is_eog(self, token: int) -> bool: ...
    def check_constraint(self, constraint: Constraint) -> None: ...  # ValueError: unusable
    def execute(self, out: SchedulerOutput) -> dict[str, int]: ...
    def release(self, request: Request) -> None: ...
    def close(self) -> None: ...


class Engine:
    def __init__(
        self,
        runner: Runner,
        *,
        max_batch_tokens: int = 256,
        max_queue: int = 64,
        policy: str = "fair",
        max_running: int | None = None,
        aging: float = 30.0,
        max_wait: float | None = None,
        min_stream_speed: float = 0.0,
        hard_min_stream_speed: float = 0.0,
        ttft_target: float = 0.0,
        initial_running: int = 16,
        host_cache_bytes: int = 0,
        host_disk_bytes: int = 0,
        park_idle_steps: int = 0,
        compact_kv: bool = True,
        max_prefill_backlog: int | None = None,
        passage_kv: bool = False,
        passage_cache_bytes: int = 256 * 1024 * 1024,
        passage_disk_bytes: int = 0,
        passage_recompute: int = 0,
        find_passages: PassageFinder | None = None,
        passage_source: PassageSource | None = None,
    ) -> None:
        self.runner = runner
        self.max_wait = max_wait
        host_tokens = host_cache_bytes // max(1, runner.kv_bytes_per_token)
        disk_tokens = host_disk_bytes // max(1, runner.kv_bytes_per_token)
        # Passage KV computed once (`inference.passages`): only where the runner can move keys
        # and the knowledge app says where passages are.
        passages_on = passage_kv and runner.passage_kv and find_passages is not None
        if passage_kv and not passages_on:
            logger.warning("passage KV is off: this model's keys cannot be moved, or no finder")
        span_tokens = passage_cache_bytes // max(1, runner.kv_bytes_per_token)
        # Keep one batch of cells spare: llama.cpp places a whole micro-batch at once.
        self.scheduler = Scheduler(
            n_seq_max=runner.n_seq_max,
            kv_capacity=runner.n_ctx - max_batch_tokens,
            max_batch_tokens=max_batch_tokens,
            max_queue=max_queue,
            policy=policy,
            max_running=max_running,
            aging=aging,
            host_cache_tokens=host_tokens,
            host_disk_tokens=disk_tokens,
            park_idle_steps=park_idle_steps,
            compact=compact_kv,
            shared_pool=runner.kv_unified,
            max_prefill_backlog=max_prefill_backlog,
            span_cache_tokens=max(1, span_tokens) if passages_on else 0,
            span_disk_tokens=passage_disk_bytes // max(1, runner.kv_bytes_per_token),
            span_recompute=passage_recompute,
        )
        self.stats = EngineStats()
        self.passages = PromptPassages(
            runner,
            self.scheduler,
            self.stats,
            find=find_passages if passages_on else None,
            source=passage_source if passages_on else None,
        )
        self.kept = KeptTexts(runner, self.scheduler, self.passages.tokenize)
        ceiling = self.scheduler.max_running
        # Between `initial_running` (16) and the context's sequences: the floor decides how many
        # more than 16 run, never fewer (on a slow or shared machine, fewer would only make
        # people wait in the queue).
        base = min(initial_running, ceiling)
        # The floor yields down to the hard minimum once someone waited past the TTFT target.
        self.governor = SpeedGovernor(
            floor=min_stream_speed,
            maximum=ceiling,
            initial=base,
            minimum=base,
            ttft_target=ttft_target,
            hard_floor=hard_min_stream_speed,
        )
        self.scheduler.max_running = self.governor.limit()
        self._streams: dict[str, TextStream] = {}
        # Logprobs of tokens whose text is not out yet (held back by a stop string's prefix).
        self._logprobs: dict[str, list[dict[str, Any]]] = {}
        self.waits = Waits(self.scheduler, self.governor)
        self._last_step_end = 0.0
        self._followed = False  # the previous step left work: the next one followed at once
        self._adopt_disk_entries()
        self.passages.adopt_files()

    def _adopt_disk_entries(self) -> None:
        """Conversations an earlier run of this model left on disk come back as host entries
        (their text is not kept: a follow-up is tokenised afresh and restores the common
        prefix, which is all of it unless the reply tokenises differently)."""
        adopted = 0
        for tenant, tokens, key in self.runner.disk_entries():
            entry = self.scheduler.adopt_saved(tenant, tokens)
            self.runner.bind_disk_entry(key, entry)
            adopted += entry is not None
        if adopted:
            logger.info("%d saved conversations found on disk", adopted)

    # --- requests in and out -----------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        *,
        priority: int = 0,
        background: bool = False,
        tenant: str = "",
        follow_up: bool | None = None,
        waited: float = 0.0,
    ) -> list[Event]:
        """Queue a request. `follow_up` (default: the history holds an assistant message) puts
        it before its tenant's new conversations; `waited` is the time it already spent in a
        queue before this engine saw it, counted towards its wait bound and time to first
        token."""
        try:
            request = self._make_request(
                request_id, messages, params, priority, background, tenant=tenant
            )
        except EngineError as exc:
            self.stats.count_error(exc.code.value)
            return [failed(request_id, exc)]
        if follow_up is None:
            follow_up = any(m.role == "assistant" for m in messages)
        request.follow_up = follow_up
        request.waited = max(0.0, waited)
        if not self.scheduler.add(request):
            self.stats.count_error(ErrorCode.BUSY.value)
            return [
                Failed(
                    request_id,
                    ErrorCode.BUSY.value,
                    "The assistant is at capacity; try again shortly.",
                    retry_after=self.retry_after(),
                )
            ]
        self.stats.tenants[tenant] = self.stats.tenants.get(tenant, 0) + 1
        self._streams[request_id] = TextStream(params.stop)
        return []  # its queue position, if it has to wait, is told after the next step

    def _make_request(
        self,
        request_id: str,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        priority: int,
        background: bool = False,
        tenant: str = "",
    ) -> Request:
        params.check()
        if not messages:
            raise EngineError(ErrorCode.INVALID_REQUEST, "messages must not be empty")
        if params.constraint is not None:
            try:
                self.runner.check_constraint(params.constraint)
            except ValueError as exc:
                raise EngineError(
                    ErrorCode.INVALID_REQUEST, f"the reply's constraint cannot be used: {exc}"
                ) from exc
        try:
            parts = self.runner.render_prompt(messages)
        except Exception as exc:  # a template that rejects the conversation's shape
            raise EngineError(
                ErrorCode.INVALID_REQUEST, f"cannot format the conversation: {exc}"
            ) from exc
        parts, first_user = self.passages.mark(messages, parts)
        if params.reply_start:  # the reply's unseen start: content like any message's
            parts = [*parts, PromptPart(params.reply_start, trusted=False)]
        text = prompt_text(parts)
        prompt, found = self.kept.tokenize(parts, text, tenant)
        limit = self.runner.max_seq_tokens
        if len(prompt) >= limit:
            raise EngineError(
                ErrorCode.PROMPT_TOO_LONG,
                f"The conversation is {len(prompt)} tokens long; this model's context holds "
                f"{limit}. Start a new conversation or shorten the message.",
            )
        spans, anchor = self.passages.keyed(parts[:first_user], prompt, found, tenant)
        room = limit - len(prompt)
        if params.max_tokens > room:
            params = dataclasses.replace(params, max_tokens=room)
        return Request(
            request_id,
            prompt,
            params,
            priority=priority,
            prompt_text=text,
            prompt_parts=parts,
            background=background,
            tenant=tenant,
            spans=spans,
            anchor=anchor,
        )

    def abort(self, request_id: str) -> list[Event]:
        request = self.scheduler.get(request_id)
        if request is None:
            return []
        self.scheduler.finish(request, FinishReason.CANCELLED)
        if not self.has_work:
            self._set_limit()
        return [self._done(request), *self.waits.queue_events()]

    def fail_all(self, code: ErrorCode, message: str) -> list[Event]:
        """End every request with an error (shutdown): nobody is left waiting for nothing."""
        events: list[Event] = []
        for request in [*self.scheduler.running, *self.scheduler.waiting]:
            self.scheduler.finish(request, FinishReason.ERROR)
            self._forget(request)
            if self.passages.drop(request.request_id) is not None:
                continue  # the engine's own: no client
            self.stats.count_error(code.value)
            events.append(Failed(request.request_id, code.value, message))
        return events

    def expire_waiting(self, now: float | None = None) -> list[Event]:
        """Answer "busy" to requests that waited longer than the wait bound."""
        if self.max_wait is None or not self.scheduler.waiting:
            return []
        now = time.monotonic() if now is None else now
        events: list[Event] = []
        for request in self.scheduler.expire(now - self.max_wait):
            self._forget(request)
            job = self.passages.drop(request.request_id)
            if job is not None:
                self.passages.queue.push(job)  # nobody waits for it: later, at a quieter moment
                continue
            self.stats.count_error(ErrorCode.BUSY.value)
            events.append(
                Failed(
                    request.request_id,
                    ErrorCode.BUSY.value,
                    f"The assistant is busy: this request waited {self.max_wait:g} s without "
                    "starting; try again shortly.",
                    retry_after=self.retry_after(),
                )
            )
        return events

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def status(self) -> dict[str, object]:
        """Live numbers for the heartbeat, `/metrics` and the admin status page."""
        host = self.scheduler.host
        spans = self.scheduler.spans
        governor = self.governor
        speed = governor.stream_speed(max(1, self.num_running))
        now = time.monotonic()
        return {
            "running": self.num_running,
            "waiting": self.num_waiting,
            "sequences": self.scheduler.n_seq_max,
            "sequences_in_use": sum(
                1 for s in self.scheduler.slots if s.request is not None or s.tokens
            ),
            "running_limit": self.scheduler.max_running,
            "floor_limit": governor.limit(),
            "floor_yielding": int(governor.yielding),
            "floor_yields": governor.yields,
            "floor_yielded_seconds": round(governor.yielded_seconds(now), 1),
            **self.waits.shared_queue_status(now),
            "predicted_stream_speed": round(speed, 2) if speed is not None else None,
            "host_cache_entries": len(host) if host is not None else 0,
            "host_cache_tokens": host.used_tokens if host is not None else 0,
            "host_cache_capacity_tokens": host.capacity_tokens if host is not None else 0,
            "host_cache_bytes": self.runner.saved_bytes,
            "host_cache_disk_entries": (
                sum(e.on_disk for e in host.entries.values()) if host is not None else 0
            ),
            "host_cache_disk_tokens": host.disk_used_tokens if host is not None else 0,
            "host_cache_disk_bytes": self.runner.disk_bytes,
            "kv_compactions": self.scheduler.compactions,
            "passages_kept": len(spans) if spans is not None else 0,
            "passages_kept_tokens": spans.used_tokens if spans is not None else 0,
            "passages_disk_tokens": spans.disk_used_tokens if spans is not None else 0,
            "passages_bytes": self.runner.span_bytes,
            "passages_disk_bytes": self.runner.span_disk_bytes,
            "passages_queued": self.passages.queued,
            "grammar_tokens": self.runner.grammar_tokens,
            "grammar_resamples": self.runner.grammar_resamples,
            **self.stats.snapshot(),
        }

    def retry_after(self) -> float:
        """A rough wait before a refused request is worth retrying, in seconds."""
        return 2.0 + 0.5 * self.num_waiting

    # --- one step ----------------------------------------------------------------------------

    def step(self) -> list[Event]:
        self.passages.start()
        events = self._step()
        self.passages.take_computed()
        own = self.passages.computing
        if own:  # the engine's own requests have no client to tell
            events = [e for e in events if e.request_id not in own]
        return events

    def idle(self, now: float | None = None) -> None:
        """Nothing to do: take in the passages the documents' index lists (when due), drop
        those of deleted documents, and start computing queued passages' KV (background work,
        which gives way to every reply)."""
        self.passages.sync_if_due(now)
        self.passages.start()
        if not self.has_work:
            out = self.scheduler.take_pending()
            if out.kv_ops:
                self.runner.execute(out)

    def sync_passages(self, sets: Sequence[PassageSet]) -> None:
        """Take in the index's passages of tenants whose documents changed
        (`PromptPassages.sync`)."""
        self.passages.sync(sets)

    def compute_passages(self, sets: Sequence[PassageSet], *, max_steps: int = 1_000_000) -> int:
        """Take in `sets` and compute every queued passage now, stepping the engine until none
        is left (a tool's way, bench/rag_eval's, to ask its questions with every passage's KV
        precomputed, as an idle engine would have). How many passages are kept then."""
        if self.scheduler.spans is None:
            return 0
        self.passages.sync(sets)
        for _ in range(max_steps):
            self.passages.start()
            if not self.passages.queued:
                break
            self.step()
        return len(self.scheduler.spans)

    def _step(self) -> list[Event]:
        started = time.perf_counter()
        events = self.expire_waiting()
        self._set_limit()
        # Streams that decode this step (a request still computing its prompt is not one: a
        # long prompt left alone gets whole steps).
        decoding = sum(1 for r in self.scheduler.running if r.prefill_done)
        self.scheduler.prompt_budget = self.governor.prompt_allowance(
            decoding, self.scheduler.max_batch_tokens, due=self.waits.prompts_due()
        )
        self.scheduler.background_prompt_budget = self.governor.background_allowance(
            decoding, self.scheduler.max_batch_tokens, idle=self.waits.idle_but_background()
        )
        out = self.scheduler.schedule()
        self.kept.track_saved(out)
        for request in out.admitted:
            self._count_admission(request)
        if out.is_empty:
            if out.kv_ops:
                try:
                    self.runner.execute(out)
                except RestoreFailed as exc:
                    events += self._restore_failed(exc)
                except Exception as exc:  # a failed save: nobody is in the batch
                    logger.exception("engine KV operations failed")
                    return events + self._fail_batch(out, str(exc))
                else:
                    self.passages.count_placed(out)
            return events + self.waits.queue_events()
        try:
            sampled = self.runner.execute(out)
        except RestoreFailed as exc:
            return events + self._restore_failed(exc) + self.waits.queue_events()
        except KvPoolLost as exc:
            logger.exception("the KV pool was lost")
            return events + self._pool_lost(out, str(exc))
        except Exception as exc:
            logger.exception("engine step failed")
            return events + self._fail_batch(out, str(exc))
        decode_seconds = self.runner.last_decode_seconds
        events += self._grammar_overruns()  # before update: their tokens are not taken
        self.passages.count_placed(out)

        advanced = self.scheduler.update(out, sampled)
        now = time.monotonic()
        for request in advanced:
            events.extend(self._process_token(request, now))
        events.extend(self.waits.queue_events())

        prefill_tokens = sum(len(c.tokens) for c in out.prefills)
        self.governor.observe(
            decode_tokens=len(out.decodes),
            prefill_tokens=prefill_tokens,
            seconds=self._stream_seconds(started, decode_seconds),
        )
        warm = sum(len(c.tokens) for c in out.prefills if c.request.prefill_only)
        self.stats.steps += 1
        self.stats.decode_tokens += len(out.decodes)
        self.stats.prefill_tokens += prefill_tokens - warm
        self.stats.warm_tokens += warm
        self.stats.generated_tokens += len(advanced)
        self.stats.decode_seconds += decode_seconds
        self.stats.step_seconds += time.perf_counter() - started
        self.stats.batch_tokens.observe(out.num_tokens)
        if not self.has_work:
            self._set_limit()  # an idle engine takes no step: a yield ends now, not later
        return events

    def _set_limit(self) -> None:
        """How many requests may run: the speed floor's limit, or the hard minimum's while the
        floor yields to someone who waited past the first-token target."""
        now = time.monotonic()
        self.scheduler.max_running = self.governor.running_limit(
            oldest_wait=self.waits.oldest_wait(now), running=self.num_running, now=now
        )

    def _stream_seconds(self, started: float, decode_seconds: float) -> float:
        """How long this step kept its streams waiting for their next token: `llama_decode`
        and the rest of the step (KV moves, sampling, text), plus the worker's own work since
        the previous step when it followed at once (publishing, taking new requests). The speed
        floor plans with this, not with `llama_decode` alone, which left streams 4% under it."""
        now = time.perf_counter()
        gap = started - self._last_step_end if self._followed else 0.0
        self._last_step_end = now
        self._followed = self.has_work
        # A fake runner reports a decode time it did not spend: then that is the step.
        return max(now - started, decode_seconds) + min(max(gap, 0.0), MAX_LOOP_GAP)

    def persist(self) -> int:
        """Before a shutdown (after the drain): kept conversations go to the host cache's disk
        tier, for the next run. Returns how many are on disk then."""
        out = self.scheduler.persist()
        spans = self.scheduler.spans
        if spans is not None:
            moved = spans.spill_all()
            out.kv_ops.extend(DropSpan(d) for d in moved.dropped)
            out.kv_ops.extend(
                SpillSpan(e.entry_id, e.tenant, e.key, tuple(e.tokens), e.start)
                for e in moved.spilled
            )
        if out.kv_ops:
            self.kept.track_saved(out)
            self.runner.execute(out)
        host = self.scheduler.host
        return sum(e.on_disk for e in host.entries.values()) if host is not None else 0

    def _restore_failed(self, exc: RestoreFailed) -> list[Event]:
        """Saved KV that could not be restored (or copied) is not an error for a request that
        has not started: the batch did not run, and it computes its prompt from the next step
        on. A running reply whose KV could not be moved to another sequence cannot go on."""
        events: list[Event] = []
        for seq_id, entry in exc.failures:
            request = self.scheduler.slots[seq_id].request
            if request is not None and request.output_tokens:
                events.append(self._fail(request, "its KV could not be moved"))
                continue
            if request is not None:
                self.stats.cached_tokens -= request.num_cached - request.num_placed
                self.stats.restored_tokens -= request.num_restored
                self.stats.reused_tokens -= request.num_cached - request.num_restored
            self.scheduler.restore_failed(seq_id, entry)
            if request is not None and request.spans:
                # A passage whose KV could not be placed was forgotten: computed again once.
                self.passages.queue_missing(
                    request.tenant, request.prompt_tokens, request.anchor, request.spans
                )
            self.kept.forget(seq_id, entry)
            self.stats.restore_failures += 1
        logger.warning("%s; recomputing instead", exc)
        return events

    def _count_admission(self, request: Request) -> None:
        stats = self.stats
        if request.prefill_only:
            return  # the engine's own work: not a reply anyone waits for
        if request.admitted_at is not None:
            stats.queue_wait.observe(max(0.0, request.admitted_at - request.since))
        if not request.background:
            self.waits.note_admitted(self.scheduler.to_compute(request))
        # Passages placed in this step are counted once placed (`PromptPassages.count_placed`).
        stats.cached_tokens += request.num_cached - request.num_placed
        stats.restored_tokens += request.num_restored
        stats.reused_tokens += request.num_cached - request.num_restored
        if request.follow_up:
            stats.follow_ups += 1
            # Warm: at most the new message (and the template around it) is computed.
            if 2 * request.num_cached >= len(request.prompt_tokens):
                stats.follow_ups_warm += 1

    def _process_token(self, request: Request, now: float) -> list[Event]:
        stream = self._streams[request.request_id]
        if request.first_token_at is None:
            request.first_token_at = now
            self.stats.ttft.observe(now - request.since)
        elif request.last_token_at is not None:
            self.stats.inter_token.observe(now - request.last_token_at)
        request.last_token_at = now
        token = request.output_tokens[-1]
        reason: FinishReason | None = None
        if self.runner.is_eog(token):
            text = stream.finish()  # the end token itself is not part of the reply
            reason = FinishReason.STOP
        else:
            text = stream.push(self.runner.token_bytes(token))
            if stream.stopped:
                reason = FinishReason.STOP
            elif len(request.output_tokens) >= request.params.max_tokens:
                text += stream.finish()
                reason = FinishReason.LENGTH
        events: list[Event] = []
        if request.params.logprobs is not None:
            self._note_logprobs(request, token)
        if text:
            logprobs = self._logprobs.pop(request.request_id, None)
            events.append(Delta(request.request_id, text, logprobs))
        if reason is not None:
            self.scheduler.finish(request, reason)
            events.append(self._done(request))
        return events

    def _note_logprobs(self, request: Request, token: int) -> None:
        """Keep the sampled token's logprobs (in OpenAI's shape) for the next delta's text. The
        end token is not part of the reply, so it has none."""
        found = self.runner.last_logprobs.get(request.request_id)
        if found is None or self.runner.is_eog(token):
            return
        assert request.params.logprobs is not None
        top = [self._logprob_entry(t, lp) for t, lp in found.top[: request.params.logprobs]]
        entry = {**self._logprob_entry(token, found.logprob), "top_logprobs": top}
        self._logprobs.setdefault(request.request_id, []).append(entry)

    def _logprob_entry(self, token: int, logprob: float) -> dict[str, Any]:
        piece = self.runner.token_bytes(token)
        return {
            "token": piece.decode("utf-8", errors="replace"),
            "bytes": list(piece),
            "logprob": logprob,
        }

    def _pool_lost(self, out: SchedulerOutput, message: str) -> list[Event]:
        """Every sequence lost its KV: every running request ends with an error (those of the
        batch and those sitting it out), kept conversations are forgotten (host memory still
        holds its entries)."""
        events = self._fail_batch(out, message, also=list(self.scheduler.running))
        self.scheduler.pool_lost()
        self.kept.forget_sequences()
        return events

    def _fail_batch(
        self, out: SchedulerOutput, message: str, *, also: Sequence[Request] = ()
    ) -> list[Event]:
        events: list[Event] = []
        seen = set()
        batch = [d.request for d in out.decodes] + [c.request for c in out.prefills]
        for request in [*batch, *also]:
            if request.request_id in seen:
                continue
            seen.add(request.request_id)
            events.append(self._fail(request, message))
        return events

    def _fail(self, request: Request, message: str) -> Failed:
        """End a started request with `internal`: its sequence's KV is forgotten."""
        return self._end_with(request, ErrorCode.INTERNAL, f"generation failed: {message}")

    def _end_with(self, request: Request, code: ErrorCode, message: str) -> Failed:
        self.scheduler.finish(request, FinishReason.ERROR)
        self._forget(request)
        self.stats.count_error(code.value)
        return Failed(request.request_id, code.value, message)

    def _grammar_overruns(self) -> list[Event]:
        """A request whose grammar took longer than its budget in this step ends alone, with
        `grammar_too_slow`; the others of the batch go on (issue #32: one hostile schema held
        every tenant's replies for 24 minutes)."""
        budget = self.runner.grammar_step_seconds
        if budget <= 0:
            return []
        events: list[Event] = []
        for request_id, seconds in self.runner.last_grammar_seconds.items():
            request = self.scheduler.get(request_id)
            if seconds <= budget or request is None:
                continue
            logger.warning(
                "request %s: its grammar took %.1f s in one step (budget %.1f s); ended",
                request_id,
                seconds,
                budget,
            )
            events.append(
                self._end_with(
                    request,
                    ErrorCode.GRAMMAR_TOO_SLOW,
                    f"The reply's JSON Schema took {seconds:.1f} s to check one token (the "
                    f"limit is {budget:g} s): simplify it (fewer nested repetitions and "
                    "alternatives).",
                )
            )
        return events

    def _done(self, request: Request) -> Done:
        self.kept.keep(request)
        self._forget(request)
        completion = len(request.output_tokens)
        if (
            completion
            and request.finish_reason is FinishReason.STOP
            and self.runner.is_eog(request.output_tokens[-1])
        ):
            completion -= 1
        reason = request.finish_reason or FinishReason.ERROR
        self.stats.finished[reason.value] = self.stats.finished.get(reason.value, 0) + 1
        if not request.background and reason in (FinishReason.STOP, FinishReason.LENGTH):
            self.waits.note_finished(completion)
        end = request.finished_at or time.monotonic()
        ttft = request.first_token_at
        return Done(
            request.request_id,
            reason.value,
            prompt_tokens=len(request.prompt_tokens),
            completion_tokens=completion,
            cached_tokens=request.num_cached,
            ttft_ms=round((ttft - request.since) * 1000) if ttft is not None else None,
            total_ms=round((end - request.since) * 1000),
        )

    def _forget(self, request: Request) -> None:
        self._streams.pop(request.request_id, None)
        self._logprobs.pop(request.request_id, None)
        self.waits.forget(request.request_id)
        self.runner.release(request)
