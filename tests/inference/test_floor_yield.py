"""The speed floor yields to a first-token target, and waiting requests hear an estimated wait.

Engine logic with the fake runner, whose steps "take" what `cost` says (no sleeping): no timed
assertions. A request's wait is given with `waited` (seconds it spent in a queue before), so a
request can be made to have waited past the target without a test that waits.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from inference import speed
from inference.engine import Engine
from inference.local import LocalTransport
from inference.speed import HEADROOM, MIN_STEPS, SpeedGovernor, fill, worth_retelling
from inference.types import ChatMessage, Event, Queued, SamplingParams
from inference.worker import EngineWorker, Submission
from tests.fakes import FakeRunner, make_engine

FLOOR, HARD, TARGET = 5.0, 2.5, 2.0


def cost(decode: int, prefill: int) -> float:
    """A slow machine's step: 45 ms, 10 ms per decode token, 4 per prompt token."""
    return 0.045 + 0.010 * decode + 0.004 * prefill


# Without prompt tokens in the steps, the most streams that keep a speed with the headroom;
# prompt tokens only lower these.
FLOOR_MOST = int((1 / (FLOOR * HEADROOM) - 0.045) / 0.010)  # 12
HARD_MOST = int((1 / (HARD * HEADROOM) - 0.045) / 0.010)  # 30


def trained_governor(**kwargs: Any) -> SpeedGovernor:
    g = SpeedGovernor(
        floor=FLOOR, maximum=48, initial=4, minimum=4, hard_floor=HARD, ttft_target=TARGET, **kwargs
    )
    for i in range(200):
        decode, prefill = 4 + i % 30, 64 if i % 10 == 0 else 0
        g.observe(decode_tokens=decode, prefill_tokens=prefill, seconds=cost(decode, prefill))
    return g


def expected_limit(g: SpeedGovernor, speed: float) -> int:
    """The line above at `speed` with the headroom, with the prompt tokens steps carried."""
    return int((1 / (speed * HEADROOM) - 0.045 - 0.004 * g.model.mean_prompt) / 0.010)


def engine(**kwargs: Any) -> Engine:
    runner = FakeRunner(n_seq_max=48, n_ctx=200_000, reply_for=lambda p: "y" * 300)
    runner.step_seconds = cost
    options: dict[str, Any] = {
        "max_batch_tokens": 256,
        "max_queue": 128,
        "min_stream_speed": FLOOR,
        "hard_min_stream_speed": HARD,
        "ttft_target": TARGET,
        "initial_running": 4,
    }
    return make_engine(runner, **{**options, **kwargs})


def ask(e: Engine, rid: str, *, waited: float = 0.0, tenant: str = "", max_tokens: int = 64):
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    events = e.add_request(rid, [ChatMessage("user", rid)], params, tenant=tenant, waited=waited)
    assert events == []


def warm_up(e: Engine, requests: int = 16) -> None:
    """Enough steps, with more streams once the first 20 are measured, to fit the step line.
    16 long replies: the floor's limit (about 11) runs, the rest wait."""
    for i in range(requests):
        ask(e, f"warm{i}")
    for _ in range(MIN_STEPS + 5):
        e.step()
    assert e.governor.model.steps_seen >= MIN_STEPS


# --- the governor ------------------------------------------------------------------------------


def test_the_governor_yields_to_the_hard_minimums_limit_once_a_wait_passes_the_target():
    g = trained_governor()
    floor_limit = g.limit()
    assert floor_limit == expected_limit(g, FLOOR) == 10
    assert g.running_limit(oldest_wait=None, running=floor_limit, now=0.0) == floor_limit
    assert g.running_limit(oldest_wait=1.9, running=floor_limit, now=1.0) == floor_limit
    assert not g.yielding
    yielded = g.running_limit(oldest_wait=2.1, running=floor_limit, now=2.0)
    assert yielded == g.limit_at(HARD) == expected_limit(g, HARD) == 27
    assert g.yielding
    assert g.yields == 1
    # The same line at the hard minimum's speed, with the same headroom.
    fast_enough = g.stream_speed(yielded)
    too_slow = g.stream_speed(yielded + 1)
    assert fast_enough is not None
    assert too_slow is not None
    assert fast_enough >= HARD * HEADROOM > too_slow


def test_the_yield_holds_until_nobody_waits_and_the_streams_fit_under_the_floor_again():
    g = trained_governor()
    floor_limit = g.limit()
    g.running_limit(oldest_wait=3.0, running=floor_limit, now=10.0)
    # The queue drained, but more streams run than the floor's limit: a newcomer would wait
    # out the target again behind them, so the yield holds (and it is not counted twice).
    assert g.running_limit(oldest_wait=None, running=25, now=11.0) == g.limit_at(HARD)
    assert g.running_limit(oldest_wait=0.1, running=floor_limit, now=12.0) == g.limit_at(HARD)
    assert g.yielding
    # Nobody waits and the streams fit under the floor: back to the floor's limit.
    assert g.running_limit(oldest_wait=None, running=floor_limit, now=14.5) == floor_limit
    assert not g.yielding
    assert g.yields == 1
    assert g.yielded_seconds(now=100.0) == 4.5
    # The next wait past the target yields again.
    g.running_limit(oldest_wait=2.0, running=floor_limit, now=20.0)
    assert g.yields == 2
    assert g.yielded_seconds(now=21.0) == 5.5


def test_a_target_of_zero_keeps_the_floor_a_wall():
    g = trained_governor()
    g.ttft_target = 0.0
    assert g.running_limit(oldest_wait=60.0, running=g.limit(), now=0.0) == g.limit() == 10
    assert g.yields == 0


def test_with_no_hard_minimum_the_floor_yields_up_to_every_sequence():
    g = trained_governor()
    g.hard_floor = 0.0
    assert g.running_limit(oldest_wait=2.5, running=g.limit(), now=0.0) == 48


def test_the_floor_does_not_yield_before_the_steps_are_measured():
    g = SpeedGovernor(
        floor=FLOOR, maximum=48, initial=16, minimum=16, hard_floor=HARD, ttft_target=TARGET
    )
    assert g.running_limit(oldest_wait=30.0, running=16, now=0.0) == 16
    assert not g.yielding  # the hard minimum's limit is not known either: nothing to yield
    assert g.yields == 0


# --- the engine ------------------------------------------------------------------------------


def test_the_engine_yields_when_the_oldest_wait_passes_the_target():
    e = engine()
    warm_up(e)
    floor_limit = e.governor.limit()
    assert FLOOR_MOST - 2 <= floor_limit <= FLOOR_MOST
    for i in range(30):
        ask(e, f"fresh{i}")  # just asked: they wait at the floor
    e.step()
    at_the_floor = e.num_running
    assert at_the_floor <= FLOOR_MOST
    assert e.num_waiting >= 30
    assert not e.governor.yielding

    ask(e, "asked-3-s-ago", waited=3.0)  # a follow-up or a first turn alike
    e.step()
    assert e.governor.yielding
    assert e.governor.yields == 1
    assert at_the_floor + 10 <= e.num_running <= HARD_MOST
    status = e.status()
    assert HARD_MOST >= status["running_limit"] > status["floor_limit"]
    assert status["floor_yielding"] == 1
    assert status["floor_yields"] == 1
    assert status["oldest_wait_seconds"] is not None
    assert status["oldest_wait_seconds"] >= 3.0


def test_the_yield_never_runs_streams_below_the_hard_minimum():
    e = engine()
    warm_up(e)
    for i in range(80):
        ask(e, f"late{i}", waited=5.0)  # everyone has waited past the target
    most = 0
    while e.has_work:
        e.step()
        most = max(most, e.num_running)
        assert e.num_running <= HARD_MOST  # 2.5 tokens/s with the headroom, never slower
    assert most > FLOOR_MOST  # it did yield


def test_the_limit_returns_to_the_floors_when_the_queue_drains():
    e = engine()
    warm_up(e, requests=10)  # all ten run: the floor's limit is about 11
    floor_limit = e.governor.limit()
    for i in range(10):
        ask(e, f"late{i}", waited=3.0)
    e.step()
    assert e.governor.yielding
    assert e.num_waiting == 0  # all admitted: the hard minimum's limit holds them
    assert e.num_running > floor_limit
    # Nobody waits, but the streams are above the floor's limit: a newcomer starts at once.
    ask(e, "newcomer")
    e.step()
    assert e.scheduler.get("newcomer") in e.scheduler.running
    while e.has_work:
        e.step()
    assert not e.governor.yielding
    assert e.scheduler.max_running == e.governor.limit()
    assert e.status()["floor_yielding"] == 0
    # Back at the floor: new requests beyond its limit wait again.
    for i in range(FLOOR_MOST + 5):
        ask(e, f"next{i}")
    e.step()
    assert e.num_running == e.scheduler.max_running <= FLOOR_MOST
    assert e.num_waiting >= 5


def test_the_yield_changes_how_many_run_not_who_goes_next():
    e = engine()
    warm_up(e)
    for i in range(20):
        ask(e, f"a{i}", tenant="a", waited=2.5)
    e.step()  # A's requests waited past the target: the floor yields, and some of them start
    assert e.governor.yielding
    # B's few arrive just now, after A's backlog (which has waited past the target). Fair
    # share puts B's first, whoever has waited longest: the yield must not let the oldest jump
    # the queue, nor change the order in any other way.
    for i in range(4):
        ask(e, f"b{i}", tenant="b")
    for i in range(20, 40):
        ask(e, f"a{i}", tenant="a", waited=2.5)
    order = [r.request_id for r in e.scheduler.waiting]
    assert [rid[0] for rid in order[:8]] == list("babababa")
    started: list[str] = []
    above_the_floor = 0
    while e.num_waiting:
        before = {r.request_id for r in e.scheduler.running}
        e.step()
        new = [r.request_id for r in e.scheduler.running if r.request_id not in before]
        started += new
        if new and e.num_running > e.governor.limit():
            above_the_floor += 1
    assert started == order  # in the queue's own order
    assert above_the_floor >= 3  # and they started because the floor yielded


def test_a_reply_waiting_in_the_shared_queue_makes_the_floor_yield():
    """With Redis the worker takes only what can start: at the floor's limit the replies wait
    in the shared queue, not in the engine's, and the floor must yield for them all the same."""

    class SharedQueue(LocalTransport):
        shared_queue = True

    e = engine()
    transport = SharedQueue()
    worker = EngineWorker(e, transport, idle_wait=0)
    warm_up(e)
    floor_limit = e.governor.limit()
    listener: list[Event] = []
    for i in range(10):
        transport.submit(
            Submission(f"s{i}", (ChatMessage("user", f"s{i}"),), SamplingParams(temperature=0)),
            listener.append,
        )
    worker.run_once()
    assert e.num_running <= FLOOR_MOST
    assert transport.pending_count() == 10  # nothing free: they stay in the shared queue
    old = Submission(
        "old",
        (ChatMessage("user", "old"),),
        SamplingParams(temperature=0),
        submitted_at=time.time() - 3.0,
    )
    transport.submit(old, listener.append)
    worker.run_once()  # the worker tells the engine how long the shared queue's oldest waited
    worker.run_once()  # the yield's free sequences take from the shared queue
    assert e.governor.yielding
    assert e.num_running > floor_limit
    assert transport.pending_count() < 11


# --- estimated waits -----------------------------------------------------------------------------


def queued(events: list[Event]) -> dict[str, Queued]:
    return {e.request_id: e for e in events if isinstance(e, Queued)}


def measured_pair(max_tokens: int = 40) -> Engine:
    """Two sequences, the floor off: pairs of replies of `max_tokens` tokens (which then is the
    typical reply length) until enough steps were measured."""
    runner = FakeRunner(n_seq_max=2, n_ctx=10_000, reply_for=lambda p: "y" * 100)
    runner.step_seconds = cost
    e = make_engine(runner, max_batch_tokens=64, max_queue=16)
    n = 0
    while e.governor.model.steps_seen < MIN_STEPS:
        for _ in range(2):
            ask(e, f"warm{n}", max_tokens=max_tokens)
            n += 1
        while e.has_work:
            e.step()
    return e


def test_a_queued_request_hears_an_estimate_that_shrinks_as_the_queue_moves():
    e = measured_pair()
    for i in range(2):
        ask(e, f"run{i}", max_tokens=40)
    for _ in range(5):
        e.step()
    for i in range(3):
        ask(e, f"w{i}", max_tokens=40)
    told: dict[str, list[Queued]] = {}
    while e.has_work:
        for event in e.step():
            if isinstance(event, Queued):
                told.setdefault(event.request_id, []).append(event)
    heard = told["w2"]
    estimates = [q.estimated_wait or 0.0 for q in heard]
    assert all(q.estimated_wait is not None for q in heard), heard
    assert estimates == sorted(estimates, reverse=True)
    assert len(set(estimates)) >= 3  # told again as it moved, not only when its place changed
    assert heard[0].position == 3
    assert heard[-1].position == 1
    assert estimates[0] > 2 * estimates[-1]


def test_estimates_follow_the_queue_order_and_the_step_model():
    e = measured_pair()
    for i in range(2):
        ask(e, f"run{i}", max_tokens=40)
    for _ in range(5):
        e.step()
    for i in range(4):
        ask(e, f"w{i}", max_tokens=40)
    told = queued(e.step())
    assert [told[f"w{i}"].position for i in range(4)] == [1, 2, 3, 4]
    assert all(told[f"w{i}"].estimated_wait is not None for i in range(4))
    waits = [told[f"w{i}"].estimated_wait or 0.0 for i in range(4)]
    assert waits[0] == waits[1] < waits[2] == waits[3]  # two sequences free together
    step = e.governor.step_seconds(2)
    assert step is not None
    assert abs(step - cost(2, 0)) < 0.01
    generated = len(e.scheduler.running[0].output_tokens)
    # The two running replies end after 40 tokens (the typical reply, and their max_tokens);
    # the next two hold the sequences for a typical reply after that.
    assert abs(waits[0] - (40 - generated) * step) <= 0.15
    assert abs(waits[2] - waits[0] - 40 * step) <= 0.15


def test_the_estimate_is_unknown_until_the_steps_are_measured():
    runner = FakeRunner(n_seq_max=1, reply_for=lambda p: "y" * 100)
    runner.step_seconds = cost
    e = make_engine(runner)
    ask(e, "first")
    ask(e, "second")
    told = queued(e.step())
    assert told["second"].position == 1
    assert told["second"].estimated_wait is None


def test_an_estimate_counts_the_yield_that_is_coming():
    """At the floor's limit with the yield to come, a request's turn comes when the oldest
    waiting reply passes the target, not when a stream ends."""
    e = engine()
    warm_up(e)
    ask(e, "soon", waited=1.5)
    told = queued(e.step())
    estimate = told["soon"].estimated_wait
    assert estimate is not None
    assert estimate <= TARGET - 1.5 + 0.1


def test_fill_takes_the_first_free_slot_in_queue_order():
    starts, left = fill([(5.0, 10.0), (0.0, 10.0), (2.0, 10.0)], 4)
    assert starts == [0.0, 2.0, 5.0, 10.0]
    assert left == [(12.0, 10.0), (15.0, 10.0), (20.0, 10.0)]
    assert fill([], 3) == ([], [])


def test_a_backlog_token_costs_what_the_recent_prompt_steps_took_when_the_plan_says_less():
    # The plan: 8 streams decode (0.125 s a step), prompts late for the target go in whole
    # 256-token steps, so a backlog token is 4 ms + 0.125 / 256 s.
    g = SpeedGovernor(floor=FLOOR, maximum=48, initial=4, hard_floor=HARD, ttft_target=TARGET)
    for i in range(200):  # prompt chunks too small to be a backlog's: only the line knows them
        decode, prefill = 4 + i % 30, 16 if i % 10 == 0 else 0
        g.observe(decode_tokens=decode, prefill_tokens=prefill, seconds=cost(decode, prefill))
    late = [(2000, -1.0)]
    planned = g.backlog_seconds(8, 256, due=late)
    assert planned is not None
    fixed, per_decode, _ = g.model.coefficients() or (0.0, 0.0, 0.0)
    decode_only = g.decode_only_seconds(8) or fixed + per_decode * 8
    assert planned == pytest.approx((g.prompt_seconds() or 0) + decode_only / 256)
    # The steps that carried prompts went in 40-token chunks and took 0.5 s each (12.5 ms a
    # token): the wait told follows them, not the plan.
    for _ in range(30):
        g.observe(decode_tokens=8, prefill_tokens=40, seconds=0.5)
    walled = g.backlog_seconds(8, 256, due=late)
    assert walled is not None
    assert walled >= 0.5 / 40 - 1e-9
    # A follow-up's few new tokens beside the streams are not a backlog's chunks: they leave it.
    for _ in range(30):
        g.observe(decode_tokens=8, prefill_tokens=4, seconds=0.3)
    assert g.backlog_seconds(8, 256, due=late) == pytest.approx(walled, rel=0.3)


def test_the_shared_queue_waits_for_the_prompts_of_those_ahead_and_its_own():
    # Two workers: one's prompts end in 2 s (a prompt there takes 4 s), the other's in 5 s (3 s
    # a prompt). In queue order each request goes where the prompts end first.
    queues = [(2.0, 0.005, 800.0), (5.0, 0.003, 1000.0)]
    ends = [speed.shared_prompt_wait(rank, queues) for rank in range(4)]
    assert ends == [6.0, 8.0, 10.0, 11.0]  # 2+4; 5+3; 6+4; 8+3
    assert speed.shared_prompt_wait(0, []) is None
    assert speed.shared_prompt_wait(0, [(-1.0, 0.005, 200.0)]) == 1.0  # a stale past wait is now


def test_an_estimate_is_told_again_once_it_moved_enough():
    assert worth_retelling(None, 3.0)
    assert worth_retelling(3.0, None)
    assert not worth_retelling(None, None)
    assert not worth_retelling(30.0, 26.0)  # under a fifth
    assert worth_retelling(30.0, 23.0)
    assert not worth_retelling(2.0, 1.2)  # under a second
    assert speed.worth_retelling(2.0, 0.5)


def test_an_estimate_counts_the_prompts_to_compute_ahead() -> None:
    # Issue #35: on a company corpus the queue is the prompts'. Three questions of 700
    # uncached tokens wait behind two running replies: the third's first word needs the two
    # prompts before it and its own computed (4 ms a token here), whatever the sequences say.
    e = measured_pair()
    for i in range(2):
        ask(e, f"run{i}", max_tokens=40)
    for _ in range(5):
        e.step()
    params = SamplingParams(temperature=0, max_tokens=40)
    for i in range(3):
        messages = [ChatMessage("user", f"w{i} " + "passage text " * 55)]
        assert e.add_request(f"w{i}", messages, params) == []
    told = queued(e.step())
    per_token = e.governor.prompt_seconds()
    assert per_token is not None
    prompts = [e.scheduler.uncached_estimate(r) for r in e.scheduler.waiting]
    assert min(prompts) >= 700
    waits = [told[f"w{i}"].estimated_wait or 0.0 for i in range(3)]
    assert waits == sorted(waits)
    assert waits[2] >= 0.95 * sum(prompts) * per_token
    # Without the prompts the sequences alone would have said less: w0 and w1 free together.
    slots = e.waits.queue_slots(time.monotonic())
    assert slots is not None
    assert waits[1] > fill(slots, 3)[0][1] + 0.5


@pytest.mark.parametrize("policy", ["no floor", "floor and target"])
def test_an_estimate_behind_a_prompt_backlog_counts_the_streams_steps_too(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #35 §4: the prompts ahead are computed in chunks beside the running streams, and
    # each chunk's step also pays the streams' decode and the step's fixed cost. The wait told
    # to the last of three 700-token questions is checked against the fake time that passed
    # until its first word; charged per prompt token alone it came out a third short. The
    # engine's clock is the fake steps' time, so the first-token target passes as it would.
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])

    def timed(decode: int, prefill: int) -> float:
        took = cost(decode, prefill)
        clock[0] += took
        return took

    runner = FakeRunner(n_seq_max=8, n_ctx=50_000, reply_for=lambda p: "y" * 400)
    runner.step_seconds = timed
    options: dict[str, Any] = {"max_batch_tokens": 64, "max_queue": 16}
    if policy == "floor and target":
        options.update(min_stream_speed=FLOOR, hard_min_stream_speed=HARD, ttft_target=TARGET)
    e = make_engine(runner, **options)
    for i in range(4):
        ask(e, f"run{i}", max_tokens=300)
    for _ in range(MIN_STEPS + 10):
        e.step()  # four streams decoding, their prompts' chunks measured
    params = SamplingParams(temperature=0, max_tokens=40)
    for i in range(3):
        messages = [ChatMessage("user", f"w{i} " + "passage text " * 55)]
        assert e.add_request(f"w{i}", messages, params) == []
    prompts = [e.scheduler.uncached_estimate(r) for r in e.scheduler.waiting]
    told_at, told = clock[0], None
    first_word = None
    while first_word is None:
        for event in e.step():
            if isinstance(event, Queued) and event.request_id == "w2" and told is None:
                told = event.estimated_wait
            if getattr(event, "request_id", None) == "w2" and not isinstance(event, Queued):
                first_word = clock[0] - told_at
    assert told is not None
    assert abs(told - first_word) <= 0.2 * first_word, (told, first_word)
    per_token = e.governor.prompt_seconds()
    assert per_token is not None
    assert sum(prompts) * per_token < 0.8 * first_word  # what the old estimate said
