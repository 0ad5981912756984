"""Tenant limits and quotas (tenants/limits.py): the reserve / settle scripts, on the in-process
Redis of the embedded mode and on a real Redis, with a clock the tests move by hand."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import fakeredis
import pytest
import redis

from tenants.limits import Limiter, Limits, Plan, Refusal
from tests import needs


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["in-process", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[object]:
    if request.param == "in-process":
        yield fakeredis.FakeRedis()
        return
    client = redis.Redis.from_url(needs.redis_url())
    yield client
    client.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(backend: object, clock: Clock) -> Iterator[Limiter]:
    prefix = f"test-limits-{uuid.uuid4().hex[:10]}"
    limiter = Limiter(backend, prefix=prefix, lease_seconds=30, clock=clock)
    yield limiter
    for key in limiter.redis.scan_iter(f"{prefix}:*"):
        limiter.redis.delete(key)


def plan(tokens: int = 10, principal: str = "user:1", **limits: int | None) -> Plan:
    return Plan(
        request_id=uuid.uuid4().hex,
        tenant_id=7,
        principal=principal,
        tokens=tokens,
        limits=Limits(**limits),
        day="2026-11-30",
        month="2026-11",
        seconds_to_next_day=3_600,
        seconds_to_next_month=86_400,
    )


def no_usage(period: str) -> int:
    return 0


def reserve(limiter: Limiter, p: Plan, used: int = 0) -> Refusal | None:
    return limiter.reserve(p, used_in_period=lambda period: used)


# --- per-minute windows -------------------------------------------------------------------


def test_requests_per_minute_refuses_the_next_one_until_the_oldest_leaves_the_window(
    limiter: Limiter, clock: Clock
) -> None:
    for _ in range(3):
        assert reserve(limiter, plan(requests_per_minute=3)) is None
        clock.now += 10
    refusal = reserve(limiter, plan(requests_per_minute=3))
    assert refusal is not None
    assert refusal.reason == "requests_per_minute"
    assert refusal.code == "rate_limited"
    assert refusal.retry_after == pytest.approx(30, abs=0.01)  # the first left at t+60
    clock.now += 30.01
    assert reserve(limiter, plan(requests_per_minute=3)) is None


def test_tokens_per_minute_counts_the_worst_case_until_the_request_settles(
    limiter: Limiter, clock: Clock
) -> None:
    first = plan(tokens=60, tokens_per_minute=100)
    assert reserve(limiter, first) is None
    refusal = reserve(limiter, plan(tokens=60, tokens_per_minute=100))
    assert refusal is not None
    assert refusal.reason == "tokens_per_minute"
    # The first used 25 of its 60: the 35 it did not use are free again.
    limiter.settle(first, used_tokens=25)
    assert reserve(limiter, plan(tokens=60, tokens_per_minute=100)) is None
    assert limiter.snapshot(first)["tokens_in_window"] == 85


def test_tokens_per_minute_says_when_enough_of_the_window_has_expired(
    limiter: Limiter, clock: Clock
) -> None:
    for _ in range(4):
        assert reserve(limiter, plan(tokens=25, tokens_per_minute=100)) is None
        clock.now += 5
    refusal = reserve(limiter, plan(tokens=40, tokens_per_minute=100))
    assert refusal is not None
    # Two of the 25s must leave the window: the second was made at +5 s, leaves at +65 s.
    assert refusal.retry_after == pytest.approx(65 - 20, abs=0.01)


def test_a_request_bigger_than_the_whole_minute_is_refused_whatever_the_window(
    limiter: Limiter,
) -> None:
    refusal = reserve(limiter, plan(tokens=500, tokens_per_minute=100))
    assert refusal is not None
    assert refusal.reason == "tokens_per_minute"


# --- concurrent streams ---------------------------------------------------------------------


def test_concurrent_streams_are_held_until_settled(limiter: Limiter) -> None:
    a, b = plan(concurrent_streams=2), plan(concurrent_streams=2)
    assert reserve(limiter, a) is None
    assert reserve(limiter, b) is None
    refusal = reserve(limiter, plan(concurrent_streams=2))
    assert refusal is not None
    assert refusal.reason == "concurrent_streams"
    limiter.settle(a, used_tokens=5)
    assert reserve(limiter, plan(concurrent_streams=2)) is None


def test_a_stream_slot_whose_process_died_expires_with_its_lease(
    limiter: Limiter, clock: Clock
) -> None:
    held = plan(concurrent_streams=1)
    assert reserve(limiter, held) is None
    clock.now += 20
    limiter.renew(held)  # the streaming process is alive at +20 s
    clock.now += 20
    assert reserve(limiter, plan(concurrent_streams=1)) is not None
    clock.now += 11  # no renewal since +20 s: the lease (30 s) ran out at +50 s
    assert reserve(limiter, plan(concurrent_streams=1)) is None


def test_one_users_streams_are_limited_apart_from_the_tenants(limiter: Limiter) -> None:
    mine = [plan(principal="user:1", principal_concurrent_streams=2) for _ in range(2)]
    for p in mine:
        assert reserve(limiter, p) is None
    refusal = reserve(limiter, plan(principal="user:1", principal_concurrent_streams=2))
    assert refusal is not None
    assert refusal.reason == "principal_concurrent_streams"
    assert reserve(limiter, plan(principal="user:2", principal_concurrent_streams=2)) is None


def test_background_work_holds_no_stream_and_counts_in_no_window(limiter: Limiter) -> None:
    assert reserve(limiter, plan(concurrent_streams=1, requests_per_minute=1)) is None
    background = replace(
        plan(concurrent_streams=1, requests_per_minute=1, daily_token_quota=1_000),
        streams=False,
        rate=False,
    )
    assert reserve(limiter, background) is None
    assert limiter.snapshot(background)["day_tokens"] == 10


# --- quotas ------------------------------------------------------------------------------------


def test_a_quota_counter_starts_from_the_recorded_usage_and_refuses_beyond_it(
    limiter: Limiter,
) -> None:
    asked = []

    def recorded(period: str) -> int:
        asked.append(period)
        return 950

    first = plan(tokens=40, daily_token_quota=1_000)
    assert limiter.reserve(first, used_in_period=recorded) is None
    assert asked == ["day"]  # seeded once from the database, then counted in Redis
    refusal = limiter.reserve(plan(tokens=40, daily_token_quota=1_000), used_in_period=recorded)
    assert refusal is not None
    assert refusal.reason == "daily_token_quota"
    assert refusal.code == "quota_exceeded"
    assert refusal.retry_after == 3_600  # the next local midnight
    assert asked == ["day"]
    limiter.settle(first, used_tokens=10)
    assert (
        limiter.reserve(plan(tokens=40, daily_token_quota=1_000), used_in_period=recorded) is None
    )


def test_the_monthly_quota_is_its_own_counter(limiter: Limiter) -> None:
    p = plan(tokens=40, daily_token_quota=1_000, monthly_token_quota=5_000)
    assert limiter.reserve(p, used_in_period=lambda period: 4_990 if period == "month" else 0)
    refusal = reserve(limiter, p)
    assert refusal is not None
    assert refusal.reason == "monthly_token_quota"


def test_a_refused_request_changes_no_counter(limiter: Limiter) -> None:
    assert reserve(limiter, plan(tokens=50, tokens_per_minute=60, daily_token_quota=1_000)) is None
    before = limiter.snapshot(plan())
    assert reserve(limiter, plan(tokens=50, tokens_per_minute=60, daily_token_quota=1_000))
    assert limiter.snapshot(plan()) == before


def test_settling_twice_or_an_unknown_request_changes_nothing(limiter: Limiter) -> None:
    p = plan(tokens=50, daily_token_quota=1_000)
    assert reserve(limiter, p) is None
    assert limiter.settle(p, used_tokens=20) is True
    assert limiter.settle(p, used_tokens=0) is False
    assert limiter.settle(plan(), used_tokens=99) is False
    assert limiter.snapshot(p)["day_tokens"] == 20


# --- under concurrency -------------------------------------------------------------------------


def test_fifty_requests_at_once_never_overshoot_the_tokens_per_minute(limiter: Limiter) -> None:
    plans = [plan(tokens=37, tokens_per_minute=400, daily_token_quota=10_000) for _ in range(50)]
    results: list[object] = [None] * 50
    start = threading.Barrier(50)

    def go(i: int) -> None:
        start.wait()
        results[i] = reserve(limiter, plans[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [p for p, r in zip(plans, results, strict=True) if r is None]
    assert len(admitted) == 400 // 37
    assert limiter.snapshot(plans[0])["tokens_in_window"] == 37 * len(admitted)
    for p in admitted:
        limiter.settle(p, used_tokens=30)
    snapshot = limiter.snapshot(plans[0])
    assert snapshot["open_reservations"] == 0
    assert snapshot["streams"] == 0
    assert snapshot["day_tokens"] == 30 * len(admitted)
