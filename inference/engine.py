"""The engine step: schedule, execute on the runner, update, then turn tokens into events.

Pure Python. The runner is injected: `inference.runner.LlamaRunner` in production, a fake in tests.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from inference.output import TextStream
from inference.scheduler import Scheduler, SchedulerOutput
from inference.types import (
    ChatMessage,
    Delta,
    Done,
    EngineError,
    ErrorCode,
    Event,
    Failed,
    FinishReason,
    PromptPart,
    Queued,
    Request,
    SamplingParams,
    TrustMap,
    failed,
    parts_from,
    prompt_text,
    trust_map,
)

logger = logging.getLogger(__name__)


class Runner(Protocol):
    n_seq_max: int
    n_ctx: int
    max_seq_tokens: int
    last_decode_seconds: float

    def render_prompt(self, messages: Sequence[ChatMessage]) -> list[PromptPart]: ...
    def tokenize_parts(
        self, parts: Sequence[PromptPart], *, continuation: bool = False
    ) -> list[int]: ...
    def token_bytes(self, token: int) -> bytes: ...
    def is_eog(self, token: int) -> bool: ...
    def execute(self, out: SchedulerOutput) -> dict[str, int]: ...
    def release(self, request: Request) -> None: ...
    def close(self) -> None: ...


@dataclass
class EngineStats:
    steps: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    step_seconds: float = 0.0
    decode_seconds: float = 0.0
    finished: dict[str, int] = field(default_factory=dict)

    @property
    def overhead_share(self) -> float:
        """Share of step time spent outside llama_decode (scheduling, sampling, detokenising)."""
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.decode_seconds / self.step_seconds)


@dataclass(frozen=True)
class KeptText:
    """The text a sequence's kept KV stands for, its exact tokens, and where trust changes."""

    text: str
    tokens: list[int]
    trust: TrustMap


class Engine:
    def __init__(
        self,
        runner: Runner,
        *,
        max_batch_tokens: int = 256,
        max_queue: int = 64,
        policy: str = "priority",
        max_running: int | None = None,
    ) -> None:
        self.runner = runner
        # Keep one batch of cells spare: llama.cpp places a whole micro-batch at once.
        self.scheduler = Scheduler(
            n_seq_max=runner.n_seq_max,
            kv_capacity=runner.n_ctx - max_batch_tokens,
            max_batch_tokens=max_batch_tokens,
            max_queue=max_queue,
            policy=policy,
            max_running=max_running,
        )
        self.stats = EngineStats()
        self._streams: dict[str, TextStream] = {}
        self._told_position: dict[str, int] = {}
        self._kept: dict[int, KeptText] = {}  # seq id -> what its KV holds, as text

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
    ) -> list[Event]:
        try:
            request = self._make_request(request_id, messages, params, priority, background)
            request.tenant = tenant
        except EngineError as exc:
            return [failed(request_id, exc)]
        if not self.scheduler.add(request):
            return [
                Failed(
                    request_id,
                    ErrorCode.BUSY.value,
                    "The assistant is at capacity; try again shortly.",
                    retry_after=self.retry_after(),
                )
            ]
        self._streams[request_id] = TextStream(params.stop)
        return []  # its queue position, if it has to wait, is told after the next step

    def _make_request(
        self,
        request_id: str,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        priority: int,
        background: bool = False,
    ) -> Request:
        params.check()
        if not messages:
            raise EngineError(ErrorCode.INVALID_REQUEST, "messages must not be empty")
        try:
            parts = self.runner.render_prompt(messages)
        except Exception as exc:  # a template that rejects the conversation's shape
            raise EngineError(
                ErrorCode.INVALID_REQUEST, f"cannot format the conversation: {exc}"
            ) from exc
        text = prompt_text(parts)
        prompt = self._tokenize_prompt(parts, text)
        limit = self.runner.max_seq_tokens
        if len(prompt) >= limit:
            raise EngineError(
                ErrorCode.PROMPT_TOO_LONG,
                f"The conversation is {len(prompt)} tokens long; this model's context holds "
                f"{limit}. Start a new conversation or shorten the message.",
            )
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
        )

    def _tokenize_prompt(self, parts: list[PromptPart], text: str) -> list[int]:
        """Tokens for a rendered prompt, reusing a kept sequence's exact tokens when its text is
        a prefix. A follow-up turn's prompt holds the previous reply as text; tokenising that
        text afresh can give other tokens than the ones generated (" Cor" "io" "b" vs " Cor"
        "i" "ob"), which would stop KV reuse at the reply's first token."""
        best: KeptText | None = None
        for seq_id, kept in self._kept.items():
            if (
                (best is None or len(kept.text) > len(best.text))
                and text.startswith(kept.text)
                and trust_map(parts, len(kept.text)) == kept.trust
                and self.scheduler.slots[seq_id].tokens[: len(kept.tokens)] == kept.tokens
            ):
                best = kept
        if best is None:
            return self.runner.tokenize_parts(parts)
        rest = parts_from(parts, len(best.text))
        return best.tokens + self.runner.tokenize_parts(rest, continuation=True)

    def _keep_text(self, request: Request) -> None:
        """Remember the text of what a finished request leaves in its sequence."""
        if request.seq_id is None:
            return
        self._kept.pop(request.seq_id, None)
        if not request.prefill_done or not request.prompt_text:
            return
        generated = request.output_tokens[:-1]
        pieces = [self.runner.token_bytes(t) for t in generated]
        if not all(pieces):  # a special token has no text: the text would not match the KV
            return
        try:
            reply = b"".join(pieces).decode("utf-8")
        except UnicodeDecodeError:
            return
        text = request.prompt_text + reply
        # The reply is a message content: it is never trusted either.
        trust = trust_map([*request.prompt_parts, PromptPart(reply, trusted=False)], len(text))
        self._kept[request.seq_id] = KeptText(text, request.kv_tokens(), trust)

    def abort(self, request_id: str) -> list[Event]:
        request = self.scheduler.get(request_id)
        if request is None:
            return []
        self.scheduler.finish(request, FinishReason.CANCELLED)
        return [self._done(request), *self._queue_events()]

    def fail_all(self, code: ErrorCode, message: str) -> list[Event]:
        """End every request with an error (shutdown): nobody is left waiting for nothing."""
        events: list[Event] = []
        for request in [*self.scheduler.running, *self.scheduler.waiting]:
            self.scheduler.finish(request, FinishReason.ERROR)
            self._forget(request)
            events.append(Failed(request.request_id, code.value, message))
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

    def retry_after(self) -> float:
        """A rough wait before a refused request is worth retrying, in seconds."""
        return 2.0 + 0.5 * self.num_waiting

    # --- one step ----------------------------------------------------------------------------

    def step(self) -> list[Event]:
        started = time.perf_counter()
        out = self.scheduler.schedule()
        if out.is_empty:
            if out.kv_ops:
                self.runner.execute(out)
            return self._queue_events()
        try:
            sampled = self.runner.execute(out)
        except Exception as exc:
            logger.exception("engine step failed")
            return self._fail_batch(out, str(exc))
        decode_seconds = self.runner.last_decode_seconds

        advanced = self.scheduler.update(out, sampled)
        events: list[Event] = []
        now = time.monotonic()
        for request in advanced:
            events.extend(self._process_token(request, now))
        events.extend(self._queue_events())

        self.stats.steps += 1
        self.stats.decode_tokens += len(out.decodes)
        self.stats.prefill_tokens += sum(len(c.tokens) for c in out.prefills)
        self.stats.generated_tokens += len(advanced)
        self.stats.decode_seconds += decode_seconds
        self.stats.step_seconds += time.perf_counter() - started
        return events

    def _process_token(self, request: Request, now: float) -> list[Event]:
        stream = self._streams[request.request_id]
        if request.first_token_at is None:
            request.first_token_at = now
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
        if text:
            events.append(Delta(request.request_id, text))
        if reason is not None:
            self.scheduler.finish(request, reason)
            events.append(self._done(request))
        return events

    def _fail_batch(self, out: SchedulerOutput, message: str) -> list[Event]:
        events: list[Event] = []
        seen = set()
        for request in [d.request for d in out.decodes] + [c.request for c in out.prefills]:
            if request.request_id in seen:
                continue
            seen.add(request.request_id)
            self.scheduler.finish(request, FinishReason.ERROR)
            self._forget(request)
            events.append(
                Failed(
                    request.request_id, ErrorCode.INTERNAL.value, f"generation failed: {message}"
                )
            )
        return events

    def _done(self, request: Request) -> Done:
        self._keep_text(request)
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
        self.stats.cached_tokens += request.num_cached
        end = request.finished_at or time.monotonic()
        ttft = request.first_token_at
        return Done(
            request.request_id,
            reason.value,
            prompt_tokens=len(request.prompt_tokens),
            completion_tokens=completion,
            cached_tokens=request.num_cached,
            ttft_ms=round((ttft - request.arrival) * 1000) if ttft is not None else None,
            total_ms=round((end - request.arrival) * 1000),
        )

    def _forget(self, request: Request) -> None:
        self._streams.pop(request.request_id, None)
        self._told_position.pop(request.request_id, None)
        self.runner.release(request)

    def _queue_events(self) -> list[Event]:
        """Tell each waiting request its place in the queue when it changes."""
        events: list[Event] = []
        for position, request in enumerate(self.scheduler.waiting, start=1):
            if self._told_position.get(request.request_id) != position:
                self._told_position[request.request_id] = position
                events.append(Queued(request.request_id, position))
        return events
