"""Tenant limits and quotas, exact under concurrency: one atomic script per request.

A request **reserves** its worst case (prompt tokens + max_tokens) before it reaches the engine:
a slot among the tenant's (and its user's or key's) concurrent streams, a place in the tenant's
requests-per-minute and tokens-per-minute windows, and tokens of the daily and monthly quotas.
Every check runs before any write inside one Lua script, so N requests sent at once can never
overshoot a limit: each sees the reservations of those before it. When the request ends
(served, cancelled or failed) it **settles**: the reservation becomes the tokens really used and
the stream slots are freed.

- Windows are sliding, 60 s: a sorted set of request ids scored by time (and a hash of each
  request's tokens with a running total, for tokens per minute). A request counts at its start.
- Stream slots are leases: a sorted set scored by expiry. The process that streams renews its
  leases; if it dies, its slots expire by themselves instead of leaking.
- Quota counters (used + reserved tokens of a local day or month) are rebuilt from the database
  when Redis does not have them (first use, expiry, a Redis restart): the script answers "init"
  and the caller seeds the counter with the recorded usage, then tries again.

With Redis (REDIS_URL) the counters are shared by every web process. Without it (embedded
mode: one web process) the same script runs on an in-process Redis (fakeredis with Lua), so
both modes share one implementation, not two that could drift apart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

WINDOW_MS = 60_000
DAY_KEY_TTL = 3 * 86_400
MONTH_KEY_TTL = 33 * 86_400

# Limits a request can meet, and the error code a client sees for each.
RATE_LIMITED = "rate_limited"
QUOTA_EXCEEDED = "quota_exceeded"
REASON_CODES = {
    "requests_per_minute": RATE_LIMITED,
    "tokens_per_minute": RATE_LIMITED,
    "concurrent_streams": RATE_LIMITED,
    "principal_concurrent_streams": RATE_LIMITED,
    "daily_token_quota": QUOTA_EXCEEDED,
    "monthly_token_quota": QUOTA_EXCEEDED,
}

# KEYS: 1 rpm window, 2 tpm window, 3 tpm amounts, 4 tpm total, 5 tenant streams,
#       6 principal streams, 7 day quota, 8 month quota, 9 open reservations
# ARGV: 1 request id, 2 now (ms), 3 tokens, 4 rpm, 5 tpm, 6 tenant streams, 7 principal streams,
#       8 daily quota, 9 monthly quota, 10 lease (ms), 11 streams? (1/0), 12 rate? (1/0),
#       13 seconds to the next day, 14 seconds to the next month
# A limit of -1 is no limit. Returns {"ok"} | {"init", which} | {"refused", reason, retry_ms}.
_PRUNE = """
local function prune_tpm(now)
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  for _, rid in ipairs(old) do
    local n = tonumber(redis.call('HGET', KEYS[3], rid) or '0')
    redis.call('DECRBY', KEYS[4], n)
    redis.call('HDEL', KEYS[3], rid)
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000) end
end
"""

_RESERVE = (
    _PRUNE
    + """
local rid, now, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm = tonumber(ARGV[4]), tonumber(ARGV[5])
local tenant_streams, principal_streams = tonumber(ARGV[6]), tonumber(ARGV[7])
local daily, monthly = tonumber(ARGV[8]), tonumber(ARGV[9])
local lease, streams, rate = tonumber(ARGV[10]), ARGV[11] == '1', ARGV[12] == '1'

if daily >= 0 and redis.call('EXISTS', KEYS[7]) == 0 then return {'init', 'day'} end
if monthly >= 0 and redis.call('EXISTS', KEYS[8]) == 0 then return {'init', 'month'} end

redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
prune_tpm(now)

if streams and tenant_streams >= 0 and redis.call('ZCARD', KEYS[5]) >= tenant_streams then
  return {'refused', 'concurrent_streams', 1000}
end
if streams and principal_streams >= 0 and redis.call('ZCARD', KEYS[6]) >= principal_streams then
  return {'refused', 'principal_concurrent_streams', 1000}
end
if rate and rpm >= 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 1000
  if oldest[2] then wait = tonumber(oldest[2]) + 60000 - now end
  return {'refused', 'requests_per_minute', wait}
end
if rate and tpm >= 0 then
  local total = tonumber(redis.call('GET', KEYS[4]) or '0')
  if total + tokens > tpm then
    local wait = 60000
    if tokens <= tpm then
      -- The earliest moment enough of the window has expired for this request to fit.
      local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
      for i = 1, #entries, 2 do
        total = total - tonumber(redis.call('HGET', KEYS[3], entries[i]) or '0')
        if total + tokens <= tpm then
          wait = tonumber(entries[i + 1]) + 60000 - now
          break
        end
      end
    end
    return {'refused', 'tokens_per_minute', wait}
  end
end
if daily >= 0 and tonumber(redis.call('GET', KEYS[7])) + tokens > daily then
  return {'refused', 'daily_token_quota', tonumber(ARGV[13]) * 1000}
end
if monthly >= 0 and tonumber(redis.call('GET', KEYS[8])) + tokens > monthly then
  return {'refused', 'monthly_token_quota', tonumber(ARGV[14]) * 1000}
end

-- Every check passed: reserve.
if rate then
  redis.call('ZADD', KEYS[1], now, rid)
  redis.call('PEXPIRE', KEYS[1], 120000)
  redis.call('ZADD', KEYS[2], now, rid)
  redis.call('HSET', KEYS[3], rid, tokens)
  redis.call('INCRBY', KEYS[4], tokens)
  redis.call('PEXPIRE', KEYS[2], 120000)
  redis.call('PEXPIRE', KEYS[3], 120000)
  redis.call('PEXPIRE', KEYS[4], 120000)
end
if streams then
  redis.call('ZADD', KEYS[5], now + lease, rid)
  redis.call('ZADD', KEYS[6], now + lease, rid)
  redis.call('PEXPIRE', KEYS[5], lease * 2)
  redis.call('PEXPIRE', KEYS[6], lease * 2)
end
if daily >= 0 then redis.call('INCRBY', KEYS[7], tokens) end
if monthly >= 0 then redis.call('INCRBY', KEYS[8], tokens) end
redis.call('HSET', KEYS[9], rid, tokens)
redis.call('PEXPIRE', KEYS[9], 86400000)
return {'ok'}
"""
)

# KEYS as above. ARGV: 1 request id, 2 tokens used, 3 now (ms).
# The difference between reserved and used goes back; stream slots are freed. A reservation
# that is not open any more (settled twice, or lost with a Redis restart) changes nothing.
_SETTLE = (
    _PRUNE
    + """
local rid, used = ARGV[1], tonumber(ARGV[2])
redis.call('ZREM', KEYS[5], rid)
redis.call('ZREM', KEYS[6], rid)
local reserved = redis.call('HGET', KEYS[9], rid)
if not reserved then return 0 end
redis.call('HDEL', KEYS[9], rid)
local delta = used - tonumber(reserved)
if redis.call('HEXISTS', KEYS[3], rid) == 1 then
  redis.call('HSET', KEYS[3], rid, used)
  redis.call('INCRBY', KEYS[4], delta)
end
if redis.call('EXISTS', KEYS[7]) == 1 then redis.call('INCRBY', KEYS[7], delta) end
if redis.call('EXISTS', KEYS[8]) == 1 then redis.call('INCRBY', KEYS[8], delta) end
prune_tpm(tonumber(ARGV[3]))
return 1
"""
)

# KEYS: 1 tenant streams, 2 principal streams. ARGV: 1 request id, 2 new expiry (ms),
# 3 the sets' own time to live (ms).
_RENEW = """
redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class Limits:
    """A tenant's limits as they are in the database now (None: no limit)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_streams: int | None = None
    principal_concurrent_streams: int | None = None
    daily_token_quota: int | None = None
    monthly_token_quota: int | None = None


@dataclass(frozen=True)
class Plan:
    """What one request asks of its tenant's limits."""

    request_id: str
    tenant_id: int
    principal: str  # "user:12" or "key:5": whose concurrent streams
    tokens: int  # the worst case: prompt tokens + max_tokens
    limits: Limits
    day: str  # local date of the quota windows, e.g. 2026-11-30
    month: str  # e.g. 2026-11
    seconds_to_next_day: int
    seconds_to_next_month: int
    streams: bool = True  # holds a concurrent-stream slot while it runs
    rate: bool = True  # counts in the per-minute windows (batch work counts in quotas only)
    # What each of the model's tokens counts for (QASSIST_MODEL_TOKEN_WEIGHTS): `tokens` is
    # already weighed; what the request really used is weighed with it when it settles.
    weight: float = 1.0


@dataclass(frozen=True)
class Refusal:
    reason: str  # a key of REASON_CODES
    retry_after: float  # seconds

    @property
    def code(self) -> str:
        return REASON_CODES[self.reason]


class Limiter:
    """The reserve / renew / settle operations over one Redis (real or in-process)."""

    def __init__(
        self,
        client: Any,
        *,
        prefix: str,
        lease_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = client
        self.clock = clock
        self.prefix = prefix
        self.lease_ms = int(lease_seconds * 1000)
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._renew = client.register_script(_RENEW)

    # --- keys ------------------------------------------------------------------------------

    def _keys(self, plan: Plan) -> list[str]:
        t = f"{self.prefix}:lim:{plan.tenant_id}"
        return [
            f"{t}:rpm",
            f"{t}:tpm",
            f"{t}:tpm:amounts",
            f"{t}:tpm:total",
            f"{t}:streams",
            f"{t}:streams:{plan.principal}",
            f"{t}:quota:day:{plan.day}",
            f"{t}:quota:month:{plan.month}",
            f"{t}:open",
        ]

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def quota_key(self, plan: Plan, period: str) -> str:
        return self._keys(plan)[6 if period == "day" else 7]

    # --- operations ------------------------------------------------------------------------

    def reserve(self, plan: Plan, *, used_in_period: Any) -> Refusal | None:
        """Reserve `plan`, or say which limit refuses it. `used_in_period(period)` gives the
        tokens recorded in the database for "day" or "month", to seed a missing counter."""
        limits = plan.limits
        args = [
            plan.request_id,
            self._now_ms(),
            plan.tokens,
            _arg(limits.requests_per_minute),
            _arg(limits.tokens_per_minute),
            _arg(limits.concurrent_streams),
            _arg(limits.principal_concurrent_streams),
            _arg(limits.daily_token_quota),
            _arg(limits.monthly_token_quota),
            self.lease_ms,
            int(plan.streams),
            int(plan.rate),
            plan.seconds_to_next_day,
            plan.seconds_to_next_month,
        ]
        for _attempt in range(3):
            reply = [_text(x) for x in self._reserve(keys=self._keys(plan), args=args)]
            if reply[0] == "ok":
                return None
            if reply[0] == "refused":
                return Refusal(reply[1], max(1.0, int(reply[2]) / 1000))
            period = reply[1]
            ttl = DAY_KEY_TTL if period == "day" else MONTH_KEY_TTL
            # NX: another process may have seeded it meanwhile; its value stands.
            self.redis.set(
                self.quota_key(plan, period), int(used_in_period(period)), nx=True, ex=ttl
            )
        raise RuntimeError("quota counters could not be initialised")  # pragma: no cover

    def renew(self, plan: Plan) -> None:
        keys = self._keys(plan)
        expiry = self._now_ms() + self.lease_ms
        self._renew(keys=[keys[4], keys[5]], args=[plan.request_id, expiry, 2 * self.lease_ms])

    def settle(self, plan: Plan, *, used_tokens: int) -> bool:
        """End the reservation with the tokens really used. False if it was not open."""
        reply = self._settle(
            keys=self._keys(plan), args=[plan.request_id, max(0, used_tokens), self._now_ms()]
        )
        return bool(int(reply))

    # --- for tests and the admin -------------------------------------------------------------

    def snapshot(self, plan: Plan) -> dict[str, int]:
        """The counters `plan`'s tenant has now (expired entries not yet pruned are counted)."""
        keys = self._keys(plan)
        now = self._now_ms()
        return {
            "requests_in_window": int(self.redis.zcount(keys[0], now - WINDOW_MS, "+inf")),
            "tokens_in_window": int(self.redis.get(keys[3]) or 0),
            "streams": int(self.redis.zcount(keys[4], now, "+inf")),
            "principal_streams": int(self.redis.zcount(keys[5], now, "+inf")),
            "day_tokens": int(self.redis.get(keys[6]) or 0),
            "month_tokens": int(self.redis.get(keys[7]) or 0),
            "open_reservations": int(self.redis.hlen(keys[8])),
        }


def _arg(limit: int | None) -> int:
    return -1 if limit is None else int(limit)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- one limiter per process ----------------------------------------------------------------

_limiter: Limiter | None = None
_lock = threading.Lock()


def get_limiter() -> Limiter:
    """Shared counters in Redis when REDIS_URL is set; an in-process Redis otherwise."""
    global _limiter
    with _lock:
        if _limiter is None:
            _limiter = _make_limiter()
        return _limiter


def set_limiter(limiter: Limiter | None) -> None:
    """Swap the process's limiter (tests give each test its own counters)."""
    global _limiter
    with _lock:
        _limiter = limiter


def _make_limiter() -> Limiter:
    from django.conf import settings

    client: Any
    if settings.REDIS_URL:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_timeout=2,
            socket_connect_timeout=2,
            health_check_interval=30,
            # A request waits for its admission: retry a blip briefly, then give up (about a
            # second), rather than redis-py's default of several seconds of back-off.
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        )
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    return Limiter(
        cast(Any, client),
        prefix=settings.QASSIST_REDIS_PREFIX,
        lease_seconds=settings.QASSIST_STREAM_LEASE_SECONDS,
    )
