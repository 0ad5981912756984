"""The speed floor: how many sequences may decode together while each stream stays fast enough.

Pure logic. Every running stream gets one token per engine step, so a stream's speed is one over
the step time. The step time grows with the tokens in the batch, and a decode token (which reads
its whole history's KV) costs more than a prompt token; the engine's own steps give
`seconds = fixed + per_decode * decode_tokens + per_prompt * prompt_tokens` (least squares over
recent steps, older ones fading out). The limit is the most streams N whose step, with the
prompt tokens steps carry on average, stays within `1 / floor` seconds:

    fixed + per_decode * N + per_prompt * (mean prompt tokens per step) <= 1 / (floor * HEADROOM)

It never goes below `minimum` (someone must be served) nor above the context's sequences. Until
enough steps were seen it stays at `initial`. Requests already running are never preempted: a
lower limit only stops admitting until streams finish.

The same line bounds the prompt tokens a step carries while streams decode (`prompt_allowance`):
a long prompt is prefilled in chunks that keep each step within 1.6 times its decode-only time
or within the floor's step, whichever is longer (the hard minimum's while the floor yields),
but never fewer than a reply's first word needs to come within the first-token target: one that
cannot, or has waited past it, takes whole steps and the streams wait (`deadline_allowance`).
Background work's prompts go in chunks of about one decode step (`background_allowance`).

The line is good at "how many streams" and poor at sizing prompt chunks: when the same streams
decode throughout, it cannot tell the fixed cost from the decode tokens' and lumps part of the
prompt tokens' cost into them; and a long prompt's later chunks cost more per token than its
first (each token attends over all the positions before it). So chunks are sized from two
direct measurements instead: the recent steps that carried no prompt (the decode-only time,
scaled by the line when the number of streams changed), and what prompt tokens added to the
recent steps that carried both (seconds per prompt token, smoothed over the last few such
steps). The next chunk shrinks as soon as one took longer than planned.

**The floor yields to a first-token target** (`ttft_target`, `hard_floor`). Keeping every stream
at the floor makes the rest queue behind whole replies: at 32 users on 2 cores the median user
waited 21 s for a first word. So the floor is a preference: while nobody waiting has waited
longer than `ttft_target` seconds, the limit is the floor's; once someone has, it is the limit
the same line gives at `hard_floor` (with the same headroom), and everyone waiting in the
queue's own order is admitted up to it. Below the hard minimum no new stream starts: those left
wait, and past the wait bound are answered "busy". The yield holds until nobody waits and the
running streams fit under the floor's limit again (see `running_limit` for why not as soon as
nobody waits). Running streams are never preempted: the limit only stops admitting.

**Estimated waits** (`fill`): each sequence the queue may use frees when its stream is predicted
to end (its remaining tokens times the step time at the limit), or now when it is free, or when
the yield will start; each waiting request, in the queue's order, takes the sequence that frees
first and holds it for a typical reply. A request's estimate is when its turn comes.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

# A step carrying prompt tokens takes at most this many times one without. Two is the aim for
# the streams' slowest gaps; steps vary around their plan (and the web process adds its own
# jitter), so the plan keeps a margin.
STRETCH = 1.6
# The limit plans for streams this much faster than the floor: the plan holds on average, and
# the streams that meet more prompt work than the average, or finish in longer steps as the
# histories grow, fall below it. Measured at 50 users (company workload, docs/BENCHMARKS.md):
# planned for the floor itself the slowest user's median speed was 4.7; with 8% headroom
# 4.5-5.3 over five runs; with 15%, 5.1 and 5.3, at the same tokens/s and time to first token.
HEADROOM = 1.15
MIN_PROMPT_CHUNK = 8  # prompt tokens a step may always carry, so prompts always progress
# Background work's prompt tokens a step may always carry, and what it carries before the
# steps were measured: small, since a reply arriving meanwhile waits for the step to end.
MIN_BACKGROUND_CHUNK = 8
# With no reply running or waiting, background prompts go in chunks of about this many seconds
# (what a reply arriving then may wait for the step to end), and never fewer tokens than
# IDLE_BACKGROUND_MIN: below it a step's fixed cost (the weights read once per step) takes a
# third of the machine. llama.cpp alone computing a 704-token prompt in chunks of 32 / 64 / 256
# tokens: 100 / 118-142 / 128 tokens/s on a 2-core Xeon; qassist's runner on an EPYC: 205 in
# 64, 219 in 256 (docs/BENCHMARKS.md, #35). The quarter second held the Xeon's chunks at 21-25
# tokens and the passages' KV at 84-93 tokens/s (117-120 with the floor). A reply arriving then
# waits for a 64-token step: about 0.5 s on that Xeon, 0.3 s on the EPYC.
IDLE_BACKGROUND_SECONDS = 0.25
IDLE_BACKGROUND_MIN = 64
DECAY = 0.98  # weight kept by an older step at each new one: about the last 50 steps count
MIN_STEPS = 20  # steps observed before the measured limit replaces the initial one
RIDGE = 1e-6  # added to the normal equations' diagonal, relative to each term's own scale
DECODE_WEIGHT = 0.2  # share of the latest decode-only step in the decode-only reference
PROMPT_WEIGHT = 0.4  # share of the latest chunk step in the measured prompt-token cost
# The wall time recent prompts took (`SpeedGovernor.backlog_seconds`): each step that carried at
# least BACKLOG_MIN_CHUNK prompt tokens (a backlog's chunks; a follow-up's few new tokens beside
# the streams would charge their whole step to them) keeps this weight at the next such step
# (about the last ten count), trusted once BACKLOG_MIN_TOKENS prompt tokens are behind it.
BACKLOG_MIN_CHUNK = 32
BACKLOG_DECAY = 0.9
BACKLOG_MIN_TOKENS = 256


def _solve3(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Solve the 3x3 system m x = v (Cramer's rule); None when it is (nearly) singular."""

    def det(a: list[list[float]]) -> float:
        return (
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        )

    d = det(m)
    scale = max(abs(x) for row in m for x in row) ** 3
    if scale <= 0 or abs(d) < 1e-9 * scale:
        return None
    result = []
    for col in range(3):
        mc = [[v[r] if c == col else m[r][c] for c in range(3)] for r in range(3)]
        result.append(det(mc) / d)
    return result


@dataclass
class StepModel:
    """fixed, per_decode, per_prompt seconds fitted to (decode tokens, prompt tokens, seconds)."""

    steps_seen: int = 0
    _xtx: list[list[float]] = field(default_factory=lambda: [[0.0] * 3 for _ in range(3)])
    _xty: list[float] = field(default_factory=lambda: [0.0] * 3)
    _decode: float = 0.0  # weighted sums for the fallback
    _prompt: float = 0.0
    _seconds: float = 0.0
    mean_prompt: float = 0.0  # prompt tokens per step, exponentially weighted

    def observe(self, decode_tokens: int, prompt_tokens: int, seconds: float) -> None:
        x = (1.0, float(decode_tokens), float(prompt_tokens))
        for i in range(3):
            self._xty[i] = self._xty[i] * DECAY + x[i] * seconds
            for j in range(3):
                self._xtx[i][j] = self._xtx[i][j] * DECAY + x[i] * x[j]
        self._decode = self._decode * DECAY + decode_tokens
        self._prompt = self._prompt * DECAY + prompt_tokens
        self._seconds = self._seconds * DECAY + seconds
        self.mean_prompt = self.mean_prompt * DECAY + (1 - DECAY) * prompt_tokens
        self.steps_seen += 1

    def coefficients(self) -> tuple[float, float, float] | None:
        if self.steps_seen == 0:
            return None
        # A touch of ridge: when the steps do not tell two terms apart (the same streams
        # decoding throughout make `fixed` and `per_decode` one number), the fit takes the
        # smallest coefficients that explain the steps instead of failing, so the prompt-token
        # cost is still learned from the steps that carried prompt tokens.
        xtx = [
            [v * (1.0 + RIDGE) if i == j else v for j, v in enumerate(row)]
            for i, row in enumerate(self._xtx)
        ]
        fit = _solve3(xtx, self._xty)
        # Rounding can make an exact zero slightly negative: a microsecond is zero here.
        if fit is not None and fit[0] >= -1e-6 and fit[1] > 0 and fit[2] >= -1e-6:
            return max(0.0, fit[0]), fit[1], max(0.0, fit[2])
        if fit is not None and fit[0] < 0:
            # A negative fixed cost means none to speak of: fit the per-token terms alone.
            a, b, c = xtx[1][1], xtx[1][2], xtx[2][2]
            det = a * c - b * b
            if det > 1e-12 * max(a * c, 1e-30):
                per_decode = (c * self._xty[1] - b * self._xty[2]) / det
                per_prompt = (a * self._xty[2] - b * self._xty[1]) / det
                if per_decode > 0 and per_prompt >= -1e-6:
                    return 0.0, per_decode, max(0.0, per_prompt)
        # Too little variety in the steps seen (all decode, or decode and prompt sizes moving
        # together), or a noisy fit: charge the whole step time per token (cautious).
        per_token = self._seconds / max(self._decode + self._prompt, 1.0)
        return 0.0, per_token, per_token


@dataclass
class SpeedGovernor:
    floor: float  # tokens per second each stream keeps at least; 0 disables the policy
    maximum: int
    initial: int
    minimum: int = 1
    # Once a request has waited longer than `ttft_target` seconds (0: never), the floor yields
    # down to `hard_floor` tokens/s (0: down to `maximum` streams).
    ttft_target: float = 0.0
    hard_floor: float = 0.0
    model: StepModel = field(default_factory=StepModel)
    yielding: bool = False
    yields: int = 0  # times the floor yielded
    _yielded_seconds: float = 0.0  # in yields that ended
    _yield_started: float | None = None
    # Recent steps without prompt tokens: (streams, seconds), smoothed; see the module doc.
    decode_reference: tuple[float, float] | None = None
    # Seconds one prompt token added to recent steps that also decoded, smoothed.
    prompt_token_seconds: float | None = None
    # Steps that carried prompt tokens: their whole seconds and their prompt tokens, decayed.
    _wall_seconds: float = 0.0
    _wall_tokens: float = 0.0

    def observe(self, *, decode_tokens: int, prefill_tokens: int, seconds: float) -> None:
        if decode_tokens + prefill_tokens <= 0 or seconds <= 0:
            return
        if decode_tokens > 0 and prefill_tokens == 0:
            if self.decode_reference is None:
                self.decode_reference = (float(decode_tokens), seconds)
            else:
                streams, took = self.decode_reference
                self.decode_reference = (
                    streams + DECODE_WEIGHT * (decode_tokens - streams),
                    took + DECODE_WEIGHT * (seconds - took),
                )
        elif decode_tokens > 0 and prefill_tokens >= MIN_PROMPT_CHUNK:
            decode_only = self.decode_only_seconds(decode_tokens)
            if decode_only is not None:
                cost = max(0.0, seconds - decode_only) / prefill_tokens
                old = self.prompt_token_seconds
                self.prompt_token_seconds = (
                    cost if old is None else old + PROMPT_WEIGHT * (cost - old)
                )
        if prefill_tokens >= BACKLOG_MIN_CHUNK:
            self._wall_seconds = self._wall_seconds * BACKLOG_DECAY + seconds
            self._wall_tokens = self._wall_tokens * BACKLOG_DECAY + prefill_tokens
        self.model.observe(decode_tokens, prefill_tokens, seconds)

    def decode_only_seconds(self, streams: int) -> float | None:
        """A step of `streams` decode tokens and no prompt: the recent such steps' time, scaled
        by the fitted line when the number of streams differs."""
        if self.decode_reference is None:
            return None
        ref_streams, ref_seconds = self.decode_reference
        fit = self.model.coefficients()
        if fit is None:
            return ref_seconds * streams / ref_streams
        fixed, per_decode, _ = fit
        return ref_seconds * (fixed + per_decode * streams) / (fixed + per_decode * ref_streams)

    def stream_speed(self, streams: int) -> float | None:
        """Predicted tokens/s of each stream with `streams` decoding together."""
        fit = self.model.coefficients()
        if fit is None:
            return None
        fixed, per_decode, per_prompt = fit
        return 1.0 / (fixed + per_decode * streams + per_prompt * self.model.mean_prompt)

    def prompt_allowance(
        self, decoding: int, budget: int, *, due: Sequence[tuple[int, float]] = ()
    ) -> int:
        """Prompt tokens one step may carry beside `decoding` decode tokens: as many as keep
        the step within STRETCH times its decode-only time, or within the floor's step when
        that is longer (the hard minimum's while the floor yields), so a long prompt being
        prefilled slows running streams at most that much (it is spread over more steps
        instead) — unless a reply's first word would then come after the first-token target.

        `due`: the replies whose prompts are being computed, in the order they are computed,
        each as (prompt tokens it still has to compute, seconds left until it has waited
        `ttft_target` since it was asked). Each gets at least the tokens per step that compute
        its prompt and those before it within its time left (`deadline_allowance`); one that
        cannot make it even so, or is late already, gets whole steps: the streams wait.

        The floor is what streams are promised; speed above it is theirs only while nobody
        waits for a first word. Held to STRETCH times a fast stream's step, the prompts of
        many people asking at once (each question with its passages) crept in 8-token chunks
        beside one or two streams, paying a whole step's fixed cost for a few tokens. Held to
        the floor's step, a knowledge question's 720 fresh prompt tokens took 30-odd steps of
        30 tokens beside one or two streams: its first word came at 6 s median on the company
        corpus, where llama-server, which stalls its streams for a prompt, gave it in 2.8 s
        (docs/BENCHMARKS.md, capacity 2026-12-05)."""
        fit = self.model.coefficients()
        if decoding <= 0 or fit is None or self.model.steps_seen < MIN_STEPS:
            return budget
        fixed, per_decode, per_prompt = fit
        decode_only = self.decode_only_seconds(decoding) or fixed + per_decode * decoding
        if self.prompt_token_seconds is not None:
            per_prompt = self.prompt_token_seconds
        if per_prompt <= 0:
            return budget  # prompt tokens measured as free: nothing to spread
        step = STRETCH * decode_only
        speed = self.hard_floor if self.yielding and self.hard_floor > 0 else 0.0
        speed = speed or self.floor
        if speed > 0:
            step = max(step, 1.0 / (speed * HEADROOM))
        allowance = int((step - decode_only) / per_prompt)
        if due and self.ttft_target > 0:
            allowance = max(allowance, deadline_allowance(due, decode_only, per_prompt, budget))
        return max(MIN_PROMPT_CHUNK, min(budget, allowance))

    def background_allowance(self, decoding: int, budget: int, *, idle: bool = False) -> int:
        """Prompt tokens of background work (titles, batch items, passage KV) one step may
        carry: as many as one decode step of the running streams takes (one stream's, when
        none decode). A reply's request that arrives while a step runs waits for that step to
        end; steps carrying a background prompt in one piece (a batch item's ticket of a few
        hundred tokens) made it wait several times its own prompt's time. In chunks this size
        the background prompt costs about the same compute, a step's fixed cost more per chunk.

        `idle`: no reply runs or waits. Then a chunk is what IDLE_BACKGROUND_SECONDS of prompt
        tokens allow, and at least IDLE_BACKGROUND_MIN tokens: a reply arriving waits about that
        for the step to end. One decode step's worth was 8-12 tokens there, and a step's fixed
        cost made the machine compute the company corpus's passage KV at 103 tokens/s, where it
        computes a prompt at 219."""
        fit = self.model.coefficients()
        if idle:
            per_token = self.prompt_seconds()
            if per_token is None and fit is not None and self.model.steps_seen >= MIN_STEPS:
                # Steps with prompt tokens only: the fit cannot split a step's fixed cost from
                # its tokens' and charges it all to them, so chunks start at the floor and grow.
                per_token = max(fit[1], fit[2])
            if per_token is None or per_token <= 0:
                return min(budget, IDLE_BACKGROUND_MIN)
            chunk = int(IDLE_BACKGROUND_SECONDS / per_token)
            return min(budget, max(IDLE_BACKGROUND_MIN, chunk))
        if fit is None or self.model.steps_seen < MIN_STEPS:
            return min(budget, MIN_BACKGROUND_CHUNK)
        fixed, per_decode, per_prompt = fit
        if per_prompt <= 0:
            return budget
        decode_step = fixed + per_decode * max(1, decoding)
        return max(MIN_BACKGROUND_CHUNK, min(budget, int(decode_step / per_prompt)))

    def limit(self) -> int:
        """The floor's limit: the most streams that keep `floor` tokens/s each."""
        return self.limit_at(self.floor)

    def limit_at(self, speed: float) -> int:
        """The most streams whose predicted step (with the prompt tokens steps carry on average)
        keeps each at `speed` tokens/s with HEADROOM; `maximum` for a speed of 0."""
        if speed <= 0:
            return self.maximum
        fit = self.model.coefficients()
        if fit is None or self.model.steps_seen < MIN_STEPS:
            return max(self.minimum, min(self.initial, self.maximum))
        fixed, per_decode, per_prompt = fit
        budget = 1.0 / (speed * HEADROOM) - fixed - per_prompt * self.model.mean_prompt
        return max(self.minimum, min(self.maximum, int(budget / per_decode)))

    def yielded_limit(self) -> int:
        """The limit while the floor yields: the hard minimum's, never below the floor's."""
        if self.floor <= 0:
            return self.maximum
        return max(self.limit(), self.limit_at(self.hard_floor))

    @property
    def may_yield(self) -> bool:
        """Whether a request waiting past the target would make more streams run now."""
        return self.floor > 0 and self.ttft_target > 0 and self.yielded_limit() > self.limit()

    def running_limit(self, *, oldest_wait: float | None, running: int, now: float) -> int:
        """How many requests may run now. `oldest_wait`: seconds the longest-waiting reply has
        waited since it was asked (None: no reply waits); `running`: requests running now;
        `now`: seconds on any steady clock (for the time spent yielded).

        The floor yields once `oldest_wait` passes the target, and holds the yield until nobody
        waits *and* the running streams fit under the floor's limit. Returning as soon as nobody
        waits would make every newcomer wait out the target again while the streams above the
        floor's limit finish: with demand above what the floor can serve (32 users of the
        company workload on 2 cores) almost every turn would wait about the target, and the
        limit would flap each time."""
        floor_limit = self.limit()
        if self.yielding:
            if not self.may_yield or (oldest_wait is None and running <= floor_limit):
                self._end_yield(now)
        elif oldest_wait is not None and oldest_wait >= self.ttft_target and self.may_yield:
            self.yielding = True
            self.yields += 1
            self._yield_started = now
        return self.yielded_limit() if self.yielding else floor_limit

    def _end_yield(self, now: float) -> None:
        if self._yield_started is not None:
            self._yielded_seconds += max(0.0, now - self._yield_started)
        self.yielding = False
        self._yield_started = None

    def yielded_seconds(self, now: float) -> float:
        """Seconds spent yielded, the current yield included."""
        current = now - self._yield_started if self._yield_started is not None else 0.0
        return self._yielded_seconds + max(0.0, current)

    def prompt_seconds(self) -> float | None:
        """Seconds one prompt token costs: measured beside decodes when it has been, else the
        fitted line's; None until enough steps were seen."""
        if self.prompt_token_seconds is not None:
            return self.prompt_token_seconds
        fit = self.model.coefficients()
        if fit is None or self.model.steps_seen < MIN_STEPS or fit[2] <= 0:
            return None
        return fit[2]

    def backlog_seconds(
        self, decoding: int, budget: int, *, due: Sequence[tuple[int, float]] = ()
    ) -> float | None:
        """Wall seconds a prompt token of the backlog takes to get through while `decoding`
        streams decode: prompts go in chunks of `prompt_allowance(decoding, budget, due=due)`
        tokens (`due`: the replies' prompts to compute, as there), and each chunk's step also
        pays the streams' decode and the step's fixed cost. Charged the prompt token's own cost
        alone, the wait told behind a backlog was short by 5-6 s at 10 employees on the company
        corpus and 8-26 s on the 1.5B (docs/BENCHMARKS.md, #35). None until the prompt cost is
        known.

        Never less than what the recent steps that carried prompt tokens took per prompt token,
        whole: on the company corpus the line above still said half the wait that followed
        (what it missed, such as a long prompt's later chunks attending over more positions,
        the steps spent at the floor's chunks, or the placement of passages, the steps took)."""
        per_prompt = self.prompt_seconds()
        if per_prompt is None:
            return None
        planned = per_prompt
        if decoding > 0:
            fit = self.model.coefficients()
            assert fit is not None  # prompt_seconds() is known
            decode_only = self.decode_only_seconds(decoding) or fit[0] + fit[1] * decoding
            chunk = self.prompt_allowance(decoding, budget, due=due)
            planned += decode_only / max(1, chunk)
        if self._wall_tokens < BACKLOG_MIN_TOKENS:
            return planned
        return max(planned, self._wall_seconds / self._wall_tokens)

    def step_seconds(self, streams: int) -> float | None:
        """A step's predicted seconds with `streams` decoding (None until enough steps were
        seen to trust the line): what each stream waits for its next token."""
        if self.model.steps_seen < MIN_STEPS:
            return None
        speed = self.stream_speed(max(1, streams))
        return 1.0 / speed if speed is not None and speed > 0 else None


Slot = tuple[float, float]  # (seconds until free for the next waiting request, seconds it holds it)


def fill(slots: Sequence[Slot], count: int) -> tuple[list[float], list[Slot]]:
    """When each of the next `count` waiting requests starts, in queue order: each takes the
    slot that frees first and holds it for that slot's typical reply. Returns those start
    times (empty when there are no slots) and the slots as they are left afterwards, for a
    queue behind these requests (the shared queue behind a worker's own)."""
    heap = list(slots)
    heapq.heapify(heap)
    starts: list[float] = []
    if not heap:
        return starts, []
    for _ in range(count):
        free_at, hold = heapq.heappop(heap)
        starts.append(free_at)
        heapq.heappush(heap, (free_at + hold, hold))
    return starts, sorted(heap)


def deadline_allowance(
    due: Sequence[tuple[int, float]], decode_only: float, per_prompt: float, budget: int
) -> int:
    """The fewest prompt tokens per step that compute each prompt in `due` (tokens still to
    compute, seconds left), after the ones before it, within its seconds left: `budget` when
    one cannot make it even in whole steps. A step carrying `a` prompt tokens takes
    `decode_only + a * per_prompt` seconds, so `tokens` take `ceil(tokens / a)` steps of the
    streams' own time plus `tokens * per_prompt`; what the steps may spend on the streams
    bounds their number, and that bounds `a` from below."""
    needed, ahead = 0, 0
    for tokens, left in due:
        ahead += max(0, tokens)
        if ahead <= 0:
            continue
        spare = left - ahead * per_prompt  # what the steps' streams may take of the time left
        steps = int(spare / decode_only) if decode_only > 0 and spare > 0 else 0
        if steps <= 0:
            return budget
        needed = max(needed, -(-ahead // steps))
    return min(budget, needed)


def prefill_waits(backlog: int, prompts: Sequence[int], seconds_per_token: float) -> list[float]:
    """When each waiting request's prompt will have been computed, in queue order: prompts are
    computed one after another (a long one waits for the prompts admitted before it, the
    prefill gate), after the `backlog` tokens admitted requests still have to compute. A
    sequence free now does not give a first word before that: on a company corpus the queue is
    the prompts', not the sequences' (docs/BENCHMARKS.md, "How many employees")."""
    waits: list[float] = []
    ahead = backlog
    for tokens in prompts:
        ahead += tokens
        waits.append(ahead * seconds_per_token)
    return waits


PromptQueue = tuple[float, float, float]  # (seconds until free, seconds a token, tokens a prompt)


def shared_prompt_wait(rank: int, queues: Sequence[PromptQueue]) -> float | None:
    """When the prompt of the request at `rank` of the shared queue will have been computed:
    the requests before it and itself, in queue order, each go to the worker whose prompts end
    first and add a typical prompt there. `queues`: each live worker's prompt queue from its
    heartbeat (seconds until the prompts it holds are computed, seconds a prompt token takes
    beside its streams, prompt tokens a reply typically computes); None when none told one.
    A request still in the shared queue has its prompt and those ahead of it to wait for, not
    only the sequences: on the company corpus the wait told to those was short by 5-10 s."""
    heap = [(max(0.0, free), seconds * tokens) for free, seconds, tokens in queues]
    if not heap:
        return None
    heapq.heapify(heap)
    end = 0.0
    for _ in range(rank + 1):
        free, each = heapq.heappop(heap)
        end = free + each
        heapq.heappush(heap, (end, each))
    return end


def worth_retelling(told: float | None, estimate: float | None) -> bool:
    """An estimate that moved by a second and a fifth of itself (or became known or unknown)
    is told again: it follows the queue without a message every step."""
    if told is None or estimate is None:
        return (told is None) != (estimate is None)
    return abs(estimate - told) >= max(1.0, 0.2 * told)
