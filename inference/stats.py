"""The engine's plain counters: what `/metrics` and the admin status page show. Pure Python.

The engine only counts; the worker sends a snapshot (`EngineStats.snapshot`) with its heartbeat
and the web process turns snapshots into Prometheus metrics (`inference.metrics`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

# Seconds: from a fast first token to a long queue.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# Tokens in one engine step.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512)


@dataclass
class Histogram:
    """Counts per bucket (upper bounds, the last bucket is +Inf), their sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def to_dict(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.total}


@dataclass
class EngineStats:
    steps: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens computed
    cached_tokens: int = 0  # prompt tokens not computed: reused or restored
    reused_tokens: int = 0  # ...kept in a sequence (its own or copied from another)
    restored_tokens: int = 0  # ...restored from the host-memory cache
    generated_tokens: int = 0
    # Passage KV computed once (inference.passages): prompt tokens placed from it (also in
    # cached_tokens), passage tokens of prompts computed in place (none was kept), passages
    # computed once and the tokens that took (not in prefill_tokens).
    placed_tokens: int = 0
    passage_tokens_computed: int = 0
    passages_computed: int = 0
    warm_tokens: int = 0
    restore_failures: int = 0  # saved KV that could not be restored (recomputed instead)
    step_seconds: float = 0.0
    decode_seconds: float = 0.0
    finished: dict[str, int] = field(default_factory=dict)  # finish reason -> requests
    errors: dict[str, int] = field(default_factory=dict)  # error code -> requests refused/failed
    tenants: dict[str, int] = field(default_factory=dict)  # tenant -> requests accepted
    follow_ups: int = 0  # requests continuing a conversation
    follow_ups_warm: int = 0  # ...that found most of their history kept or saved
    ttft: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    inter_token: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    queue_wait: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    batch_tokens: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))

    @property
    def overhead_share(self) -> float:
        """Share of step time spent outside llama_decode (scheduling, sampling, detokenising)."""
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.decode_seconds / self.step_seconds)

    def count_error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """Everything as JSON-ready values (cumulative since the engine started)."""
        return {
            "steps": self.steps,
            "decode_tokens": self.decode_tokens,
            "prefill_tokens": self.prefill_tokens,
            "cached_tokens": self.cached_tokens,
            "reused_tokens": self.reused_tokens,
            "restored_tokens": self.restored_tokens,
            "generated_tokens": self.generated_tokens,
            "placed_tokens": self.placed_tokens,
            "passage_tokens_computed": self.passage_tokens_computed,
            "passages_computed": self.passages_computed,
            "warm_tokens": self.warm_tokens,
            "restore_failures": self.restore_failures,
            "step_seconds": round(self.step_seconds, 4),
            "decode_seconds": round(self.decode_seconds, 4),
            "overhead_share": round(self.overhead_share, 4),
            "finished": dict(self.finished),
            "errors": dict(self.errors),
            "tenants": dict(self.tenants),
            "follow_ups": self.follow_ups,
            "follow_ups_warm": self.follow_ups_warm,
            "histograms": {
                "ttft_seconds": self.ttft.to_dict(),
                "inter_token_seconds": self.inter_token.to_dict(),
                "queue_wait_seconds": self.queue_wait.to_dict(),
                "batch_tokens": self.batch_tokens.to_dict(),
            },
        }
