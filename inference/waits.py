"""The waits an engine's queue is told, and the deadlines its prompts are computed against.

Pure Python, apart from the engine's step: it reads the scheduler's queue and running requests and
the speed governor's step model, and keeps what only estimates need (what each waiting request
was told, the typical reply and prompt, the shared queue's oldest wait). The engine asks it for
the `Queued` events after each step, for the prompts' deadlines when it sizes a step's prompt
chunk, and for the figures its heartbeat carries to the web process (`inference.transport`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from inference.scheduler import Scheduler
from inference.speed import Slot, SpeedGovernor, fill, prefill_waits, worth_retelling
from inference.types import Event, Queued, Request

TYPICAL_WEIGHT = 0.1  # share of the latest reply in the typical reply length and prompt


def _weighted(old: float | None, new: float) -> float:
    return new if old is None else old + TYPICAL_WEIGHT * (new - old)


class Waits:
    """Estimated waits of one engine's queue (see the module's docstring)."""

    def __init__(self, scheduler: Scheduler, governor: SpeedGovernor) -> None:
        self.scheduler = scheduler
        self.governor = governor
        self._told: dict[str, tuple[int, float | None]] = {}  # position, estimate told
        # Since when (engine clock) the oldest reply in a queue before this engine has waited:
        # the shared Redis queue, told by the worker (`note_waiting_elsewhere`).
        self._elsewhere_since: float | None = None
        # Completion tokens of a typical reply (exponentially weighted).
        self._typical_tokens: float | None = None
        # Prompt tokens a reply had to compute when admitted (exponentially weighted): what a
        # request still in the shared queue will add to the prompts ahead of the next one.
        self.typical_prompt: float | None = None

    # --- what the engine tells it ------------------------------------------------------------

    def note_admitted(self, prompt_tokens: int) -> None:
        """A reply was admitted with this many prompt tokens to compute."""
        self.typical_prompt = _weighted(self.typical_prompt, prompt_tokens)

    def note_finished(self, completion_tokens: int) -> None:
        """A reply ended (stopped or hit its length) after this many completion tokens."""
        self._typical_tokens = _weighted(self._typical_tokens, completion_tokens)

    def forget(self, request_id: str) -> None:
        self._told.pop(request_id, None)

    def note_waiting_elsewhere(self, since: float | None) -> None:
        """The worker tells since when (on this engine's clock, `time.monotonic()`) the oldest
        reply in the queue before this engine (the shared Redis queue) has waited, or None when
        none waits there: the floor yields for it as for a request in this engine's queue."""
        self._elsewhere_since = since

    # --- what it tells -----------------------------------------------------------------------

    def queue_events(self) -> list[Event]:
        """Tell each waiting request its place in the queue and its estimated wait, when the
        place changes or the estimate moved (`worth_retelling`)."""
        events: list[Event] = []
        waiting = list(self.scheduler.waiting)
        if not waiting:
            return events
        slots = self.queue_slots(time.monotonic())
        starts = fill(slots, len(waiting))[0] if slots is not None else []
        prompts = self.prompt_queue(waiting)[0]
        if starts and prompts:
            # A first word needs a sequence and the prompts ahead (and its own) computed.
            starts = [max(t, p) for t, p in zip(starts, prompts, strict=True)]
        for position, request in enumerate(waiting, start=1):
            if request.prefill_only:
                continue  # the engine's own work: nobody to tell
            estimate = round(starts[position - 1], 1) if starts else None
            told = self._told.get(request.request_id)
            if told is None or told[0] != position or worth_retelling(told[1], estimate):
                self._told[request.request_id] = (position, estimate)
                events.append(Queued(request.request_id, position, estimate))
        return events

    def shared_queue_status(self, now: float) -> dict[str, object]:
        """The heartbeat's figures for the shared queue behind this engine: the web process
        estimates a queued client's wait from them (`inference.transport`)."""
        oldest = self.oldest_wait(now)
        slots = self.queue_slots(now)
        # What the shared queue may count on, after this engine's own waiting requests.
        behind = fill(slots, len(self.scheduler.waiting))[1] if slots is not None else None
        prompts, per_token = self.prompt_queue([*self.scheduler.waiting, None])
        if behind is not None and prompts:
            # Nobody behind gets a first word before the prompts ahead of them are computed.
            behind = [(max(t, prompts[-1]), hold) for t, hold in behind]
        return {
            "oldest_wait_seconds": round(oldest, 2) if oldest is not None else None,
            "queue_slots": [list(slot) for slot in behind] if behind is not None else None,
            # The prompt queue the shared queue joins (`inference.speed.shared_prompt_wait`):
            # seconds until the prompts held here are computed, what one more prompt token
            # takes, and the prompt tokens a reply typically computes.
            "prompt_queue": (
                [round(prompts[-1], 2), round(per_token, 6), round(self.typical_prompt, 1)]
                if prompts and per_token is not None and self.typical_prompt is not None
                else None
            ),
        }

    # --- the estimates -----------------------------------------------------------------------

    def prompt_queue(self, waiting: Sequence[Request | None]) -> tuple[list[float], float | None]:
        """When each waiting request's prompt will have been computed (`speed.prefill_waits`:
        the admitted prompts' backlog, then each waiting prompt's uncached tokens, in queue
        order; None: one more after them, with nothing of its own), and the seconds a prompt
        token takes; ([], None) before the prompt cost is known. A token counts the wall time
        it takes beside the streams decoding now, in the chunks the governor would give these
        prompts (`SpeedGovernor.backlog_seconds`). Background work's prompts go after every
        reply's: they add nothing ahead of one."""
        scheduler = self.scheduler
        prompts = [
            0 if r is None or r.background else scheduler.uncached_estimate(r) for r in waiting
        ]
        due = self.prompts_due(
            [(r, n) for r, n in zip(waiting, prompts, strict=True) if r is not None and n > 0]
        )
        decoding = sum(1 for r in scheduler.running if r.prefill_done)
        per_token = self.governor.backlog_seconds(decoding, scheduler.max_batch_tokens, due=due)
        if per_token is None:
            return [], None
        return prefill_waits(scheduler.prefill_backlog(), prompts, per_token), per_token

    def prompts_due(self, waiting: Sequence[tuple[Request, int]] = ()) -> list[tuple[int, float]]:
        """The replies whose prompts are being computed, in admission order (the order the
        scheduler computes them in, short prompts aside, which go in one step anyway): the
        prompt tokens each still has to compute and the seconds left until it has waited the
        first-token target since it was asked (`SpeedGovernor.prompt_allowance`). `waiting`:
        requests not admitted yet, with their prompt tokens, due after those (for estimates)."""
        target = self.governor.ttft_target
        if target <= 0:
            return []
        now = time.monotonic()
        scheduler = self.scheduler
        running = [
            (r, scheduler.to_compute(r))
            for r in scheduler.running
            if not r.prefill_done and not r.background
        ]
        return [(tokens, target - (now - r.since)) for r, tokens in [*running, *waiting]]

    def idle_but_background(self) -> bool:
        """Whether no reply runs or waits, here or in the shared queue: background work may
        take longer steps (`SpeedGovernor.background_allowance`)."""
        if self.oldest_wait(time.monotonic()) is not None:
            return False
        return all(r.background for r in self.scheduler.running)

    def oldest_wait(self, now: float) -> float | None:
        """Seconds the longest-waiting reply has waited since it was asked (first turns and
        follow-ups alike; background work does not count), here or in the shared queue."""
        sinces = [self.scheduler.waiting.oldest_since(), self._elsewhere_since]
        known = [s for s in sinces if s is not None]
        return max(0.0, now - min(known)) if known else None

    def typical_reply_tokens(self) -> float:
        """A reply's typical length: the finished replies' completion tokens, exponentially
        weighted; before any finished, the running and waiting replies' mean max_tokens."""
        if self._typical_tokens is not None:
            return self._typical_tokens
        limits = [
            r.params.max_tokens
            for r in [*self.scheduler.running, *self.scheduler.waiting]
            if not r.background
        ]
        return sum(limits) / len(limits) if limits else 0.0

    def queue_slots(self, now: float) -> list[Slot] | None:
        """The sequences the queue may use, as (seconds until one is free for the next waiting
        request, seconds a typical reply then holds it); None until the step model is known.

        A running reply ends after the typical reply length minus what it has generated, at
        least a quarter of the typical length, at most what its max_tokens leaves; tokens come
        at one step each, the step predicted for the limit's streams (with a queue, the limit
        is what runs). A sequence free below the limit is free now; above the floor's limit,
        while the floor may yield, it frees when the oldest waiting reply passes the target.
        The prompt's own computation is left out: a first token follows within a step or two."""
        governor = self.governor
        limit = self.scheduler.max_running
        effective = limit
        yield_in = 0.0
        if not governor.yielding and governor.may_yield:
            effective = governor.yielded_limit()
            oldest = self.oldest_wait(now)
            yield_in = max(0.0, governor.ttft_target - (oldest or 0.0))
        step = governor.step_seconds(effective)
        if step is None:
            return None
        typical = self.typical_reply_tokens()
        ends = []
        for r in self.scheduler.running:
            done = len(r.output_tokens)
            expected = max(typical - done, typical / 4)
            ends.append(max(1.0, min(r.params.max_tokens - done, expected)) * step)
        ends.sort()
        # Streams above the limit free no sequence when they end (the first of them to end);
        # once the floor yields, the limit is `effective`.
        over = max(0, len(ends) - limit)
        if effective > limit:
            slots = sorted([max(t, yield_in) for t in ends[:over]] + ends[over:])
            slots = slots[max(0, len(slots) - effective) :]
        else:
            slots = ends[over:]
        slots += [0.0] * max(0, limit - len(ends))
        slots += [yield_in] * max(0, effective - len(slots))
        hold = max(1.0, typical) * step
        return [(round(t, 3), round(hold, 3)) for t in slots]
