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
a long prompt is prefilled in chunks that keep each step within twice its decode-only time,
and background work's prompts in chunks of about one decode step (`background_allowance`).

The line is good at "how many streams" and poor at sizing prompt chunks: when the same streams
decode throughout, it cannot tell the fixed cost from the decode tokens' and lumps part of the
prompt tokens' cost into them; and a long prompt's later chunks cost more per token than its
first (each token attends over all the positions before it). So chunks are sized from two
direct measurements instead: the recent steps that carried no prompt (the decode-only time,
scaled by the line when the number of streams changed), and what prompt tokens added to the
recent steps that carried both (seconds per prompt token, smoothed over the last few such
steps). The next chunk shrinks as soon as one took longer than planned.
"""

from __future__ import annotations

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
DECAY = 0.98  # weight kept by an older step at each new one: about the last 50 steps count
MIN_STEPS = 20  # steps observed before the measured limit replaces the initial one
RIDGE = 1e-6  # added to the normal equations' diagonal, relative to each term's own scale
DECODE_WEIGHT = 0.2  # share of the latest decode-only step in the decode-only reference
PROMPT_WEIGHT = 0.4  # share of the latest chunk step in the measured prompt-token cost


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
    model: StepModel = field(default_factory=StepModel)
    # Recent steps without prompt tokens: (streams, seconds), smoothed; see the module doc.
    decode_reference: tuple[float, float] | None = None
    # Seconds one prompt token added to recent steps that also decoded, smoothed.
    prompt_token_seconds: float | None = None

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

    def prompt_allowance(self, decoding: int, budget: int) -> int:
        """Prompt tokens one step may carry beside `decoding` decode tokens: as many as keep
        the step within STRETCH times its decode-only time, so a long prompt being prefilled
        slows running streams at most that much (it is spread over more steps instead)."""
        fit = self.model.coefficients()
        if decoding <= 0 or fit is None or self.model.steps_seen < MIN_STEPS:
            return budget
        fixed, per_decode, per_prompt = fit
        decode_only = self.decode_only_seconds(decoding) or fixed + per_decode * decoding
        if self.prompt_token_seconds is not None:
            per_prompt = self.prompt_token_seconds
        if per_prompt <= 0:
            return budget  # prompt tokens measured as free: nothing to spread
        allowance = int((STRETCH - 1.0) * decode_only / per_prompt)
        return max(MIN_PROMPT_CHUNK, min(budget, allowance))

    def background_allowance(self, decoding: int, budget: int) -> int:
        """Prompt tokens of background work (titles, batch items) one step may carry: as many
        as one decode step of the running streams takes (one stream's, when none decode).
        A reply's request that arrives while a step runs waits for that step to end; steps
        carrying a background prompt in one piece (a batch item's ticket of a few hundred
        tokens) made it wait several times its own prompt's time. In chunks this size the
        background prompt costs about the same compute, a step's fixed cost more per chunk."""
        fit = self.model.coefficients()
        if fit is None or self.model.steps_seen < MIN_STEPS:
            return min(budget, MIN_BACKGROUND_CHUNK)
        fixed, per_decode, per_prompt = fit
        if per_prompt <= 0:
            return budget
        decode_step = fixed + per_decode * max(1, decoding)
        return max(MIN_BACKGROUND_CHUNK, min(budget, int(decode_step / per_prompt)))

    def limit(self) -> int:
        if self.floor <= 0:
            return self.maximum
        fit = self.model.coefficients()
        if fit is None or self.model.steps_seen < MIN_STEPS:
            return max(self.minimum, min(self.initial, self.maximum))
        fixed, per_decode, per_prompt = fit
        budget = 1.0 / (self.floor * HEADROOM) - fixed - per_prompt * self.model.mean_prompt
        return max(self.minimum, min(self.maximum, int(budget / per_decode)))
