"""Prometheus metrics for `GET /metrics`: the engines' counters and the web's refusals.

The engine stays pure: it keeps plain counters (`inference.stats`). Each worker sends a snapshot
of them with its heartbeat (every second, into Redis or, embedded, to the web process's memory),
and the web process turns the live workers' snapshots into metric families at scrape time, one
`worker` label each. So one scrape of any web process shows every worker.

Refusals (rate limits, quotas, a full queue, the wait bound) are counted where they happen, by
`record_refusal`; with Redis the counts are kept there, so every web process reports the same
totals, otherwise in this process's memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import redis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SEP = "\x1f"  # between reason and tenant in a Redis hash field


class _MemoryRefusals:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, reason: str, tenant: str) -> None:
        with self._lock:
            key = (reason, tenant)
            self._counts[key] = self._counts.get(key, 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class _RedisRefusals:
    def __init__(self, url: str, prefix: str) -> None:
        self.key = f"{prefix}:metrics:refusals"
        # Any: redis-py types replies as unions over its decode modes; this client returns bytes.
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)

    def add(self, reason: str, tenant: str) -> None:
        self.redis.hincrby(self.key, f"{reason}{_SEP}{tenant}", 1)

    def counts(self) -> dict[tuple[str, str], int]:
        result = {}
        for field, value in self.redis.hgetall(self.key).items():
            reason, _, tenant = field.decode().partition(_SEP)
            result[(reason, tenant)] = int(value)
        return result


_refusals: _MemoryRefusals | _RedisRefusals = _MemoryRefusals()


def use_redis(url: str, prefix: str) -> None:
    """Keep refusal counts in Redis, shared by every web process (called once at start)."""
    global _refusals
    _refusals = _RedisRefusals(url, prefix)


def use_memory() -> None:
    global _refusals
    _refusals = _MemoryRefusals()


def record_refusal(*, reason: str, tenant: str) -> None:
    """Count one request refused before it reached the engine, by reason (`rate_limited`,
    `quota_exceeded`, `busy`, `wait_bound`, ...) and tenant slug. Never raises: a metrics store
    that is down must not turn a refusal into a crash."""
    try:
        _refusals.add(reason, tenant)
    except Exception:  # Redis down: the refusal itself still reaches the client
        logger.warning("could not count a refusal (%s, %s)", reason, tenant, exc_info=True)


def refusal_counts() -> dict[tuple[str, str], int]:
    try:
        return _refusals.counts()
    except Exception:
        logger.warning("could not read refusal counts", exc_info=True)
        return {}


def refusal_counts_for(tenants: Collection[str] | None) -> dict[tuple[str, str], int]:
    """The refusal counts of these tenant slugs only (None: all). Refusals without a tenant
    (an unknown API key) name nobody and are everyone's to see."""
    counts = refusal_counts()
    if tenants is None:
        return counts
    return {(r, t): n for (r, t), n in counts.items() if not t or t in tenants}


# --- the scrape --------------------------------------------------------------------------------

_GAUGES = (
    ("requests_waiting", "waiting", "Requests waiting in the worker's own queue."),
    ("requests_running", "running", "Requests being generated."),
    ("sequences", "sequences", "Sequences of the llama.cpp context."),
    ("sequences_in_use", "sequences_in_use", "Sequences running a request or keeping KV."),
    ("running_limit", "running_limit", "Requests the speed floor lets run together now."),
    ("floor_limit", "floor_limit", "Requests that keep the speed floor itself (before a yield)."),
    ("floor_yielding", "floor_yielding", "1 while the speed floor yields to a waiting request."),
    ("oldest_wait_seconds", "oldest_wait_seconds", "The longest wait of a reply not started."),
    ("host_cache_bytes", "host_cache_bytes", "Host memory held by saved sequences."),
    ("host_cache_entries", "host_cache_entries", "Conversations saved in memory or on disk."),
    ("host_cache_disk_bytes", "host_cache_disk_bytes", "Disk held by saved sequences."),
    ("host_cache_disk_entries", "host_cache_disk_entries", "Conversations saved on disk."),
    (
        "engine_step_running_seconds",
        "step_running_seconds",
        "How long the engine step running now has run (0 between steps).",
    ),
    ("engine_stalled", "stalled", "1 while a step has run past QASSIST_ENGINE_STALL_SECONDS."),
    ("passages_kept", "passages_kept", "Passages whose KV is kept (computed once)."),
    ("passages_queued", "passages_queued", "Passages waiting to have their KV computed."),
    ("passages_bytes", "passages_bytes", "Host memory held by passages' KV."),
    ("passages_disk_bytes", "passages_disk_bytes", "Disk held by passages' KV."),
)
_COUNTERS = (
    ("engine_steps", "steps", "Engine steps (one llama_decode each)."),
    ("tokens_prefilled", "prefill_tokens", "Prompt tokens computed."),
    ("tokens_generated", "generated_tokens", "Tokens generated."),
    ("tokens_reused", "reused_tokens", "Prompt tokens reused from KV kept in a sequence."),
    ("tokens_restored", "restored_tokens", "Prompt tokens restored from memory or disk."),
    ("restore_failures", "restore_failures", "Saved KV not restorable, recomputed instead."),
    ("tokens_placed", "placed_tokens", "Prompt tokens placed from passages' precomputed KV."),
    ("passage_tokens_computed", "passage_tokens_computed", "Passage tokens computed in place."),
    ("passages_computed", "passages_computed", "Passages whose KV was computed once."),
    ("tokens_precomputed", "warm_tokens", "Tokens computed for passages' KV (not replies')."),
    ("kv_compactions", "kv_compactions", "Times the KV pool was packed to close freed holes."),
    ("grammar_tokens", "grammar_tokens", "Tokens sampled under a grammar (JSON, forced calls)."),
    ("grammar_resamples", "grammar_resamples", "Of those, sampled again after the grammar's no."),
    ("follow_up_turns", "follow_ups", "Requests continuing a conversation."),
    ("follow_up_turns_warm", "follow_ups_warm", "Follow-up turns that found their history."),
    ("decode_seconds", "decode_seconds", "Seconds spent in llama_decode."),
    ("floor_yields", "floor_yields", "Times the speed floor yielded to a waiting request."),
    ("floor_yielded_seconds", "floor_yielded_seconds", "Seconds the speed floor was yielded."),
    ("cpu_turns", "cpu_turns", "Steps run holding the host's CPU turn (QASSIST_CPU_BUDGET)."),
    (
        "cpu_turn_wait_seconds",
        "cpu_turn_wait_seconds",
        "Seconds waited for the host's CPU turn while another engine stepped.",
    ),
)
_HISTOGRAMS = (
    ("time_to_first_token_seconds", "ttft_seconds", "From the request to its first token."),
    ("inter_token_seconds", "inter_token_seconds", "Between two tokens of one stream."),
    ("queue_wait_seconds", "queue_wait_seconds", "From the request to its start."),
    ("batch_tokens", "batch_tokens", "Tokens in one engine step."),
)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def families(
    workers: Iterable[dict[str, Any]],
    refusals: dict[tuple[str, str], int],
    queued: int | None = None,
) -> Iterator[Metric]:
    """Metric families for the workers' heartbeat snapshots and the refusal counts."""
    workers = list(workers)
    live = GaugeMetricFamily("qassist_workers", "Inference workers heard from recently.")
    live.add_metric([], len(workers))
    yield live
    info = GaugeMetricFamily(
        "qassist_worker_info", "The model each inference worker serves.", labels=["worker", "model"]
    )
    for w in workers:
        info.add_metric([str(w.get("id", "")), str(w.get("model", ""))], 1)
    yield info
    if queued is not None:
        shared = GaugeMetricFamily(
            "qassist_shared_queue_requests", "Requests waiting in the queue shared by workers."
        )
        shared.add_metric([], queued)
        yield shared
    for name, key, doc in _GAUGES:
        gauge = GaugeMetricFamily(f"qassist_{name}", doc, labels=["worker"])
        for w in workers:
            gauge.add_metric([str(w.get("id", ""))], _number(w.get(key)))
        yield gauge
    for name, key, doc in _COUNTERS:
        counter = CounterMetricFamily(f"qassist_{name}", doc, labels=["worker"])
        for w in workers:
            counter.add_metric([str(w.get("id", ""))], _number(w.get(key)))
        yield counter
    by_label = (
        ("requests", "tenants", "tenant", "Requests accepted by the engine, by tenant."),
        ("requests_finished", "finished", "reason", "Requests finished, by reason."),
        ("engine_errors", "errors", "code", "Requests the engine refused or failed, by code."),
    )
    for name, key, label, doc in by_label:
        counter = CounterMetricFamily(f"qassist_{name}", doc, labels=["worker", label])
        for w in workers:
            values = w.get(key)
            for value, count in (values if isinstance(values, dict) else {}).items():
                counter.add_metric([str(w.get("id", "")), str(value)], _number(count))
        yield counter
    for name, key, doc in _HISTOGRAMS:
        histogram = HistogramMetricFamily(f"qassist_{name}", doc, labels=["worker"])
        for w in workers:
            data = (w.get("histograms") or {}).get(key)
            if not data:
                continue
            bounds, counts = data["bounds"], data["counts"]
            cumulative, buckets = 0, []
            for bound, count in zip([*bounds, float("inf")], counts, strict=True):
                cumulative += count
                buckets.append(
                    ("+Inf" if bound == float("inf") else repr(float(bound)), cumulative)
                )
            histogram.add_metric([str(w.get("id", ""))], buckets, sum_value=_number(data["sum"]))
        yield histogram
    counter = CounterMetricFamily(
        "qassist_refusals",
        "Requests refused before generation, by reason and tenant.",
        labels=["reason", "tenant"],
    )
    for (reason, tenant), count in sorted(refusals.items()):
        counter.add_metric([reason, tenant], count)
    yield counter


class _Snapshot:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def render(health: dict[str, Any], *, tenants: Collection[str] | None = None) -> bytes:
    """The Prometheus text exposition for an engine client's `health()` report. `tenants`:
    the only tenant slugs whose series may be shown (None: every tenant's)."""
    # Copies: the report may be the engine's own heartbeat snapshot, shared by every scrape.
    workers = [dict(w) for w in health.get("workers") or [] if isinstance(w, dict)]
    for i, w in enumerate(workers):
        w.setdefault("id", "embedded" if health.get("mode") == "embedded" else str(i))
        if tenants is not None and isinstance(w.get("tenants"), dict):
            w["tenants"] = {k: v for k, v in w["tenants"].items() if k in tenants}
    queued = health.get("queued")
    refusals = refusal_counts_for(tenants)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        _Snapshot(list(families(workers, refusals, queued if isinstance(queued, int) else None)))
    )
    return generate_latest(registry)
