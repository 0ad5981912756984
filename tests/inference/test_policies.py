"""Scheduling policies without a model: fair shares, aging, the wait bound, the speed floor,
tenant isolation of KV reuse, and the host-memory cache (decisions checked by the strict fake)."""

from typing import Any

from inference import fairshare
from inference.engine import Engine
from inference.hostcache import common_prefix_len
from inference.scheduler import COMPACT_MIN_FREED, CompactKv, KvOp, RestoreKv, SaveKv, Scheduler
from inference.speed import HEADROOM, MIN_STEPS, STRETCH, SpeedGovernor
from inference.types import (
    ChatMessage,
    Delta,
    Done,
    Failed,
    FinishReason,
    Queued,
    Request,
    RequestStatus,
    SamplingParams,
)
from tests.fakes import FakeRunner, make_engine


def req(rid, *, tenant="", prompt=None, priority=0, follow_up=False, arrival=0.0, max_tokens=4):
    tokens = prompt if prompt is not None else [100 + i for i in range(4)]
    r = Request(rid, list(tokens), SamplingParams(max_tokens=max_tokens), priority=priority)
    r.tenant, r.follow_up, r.arrival = tenant, follow_up, arrival
    return r


def sched(**kwargs: Any) -> Scheduler:
    defaults = {"n_seq_max": 4, "kv_capacity": 10_000, "max_batch_tokens": 64, "max_queue": 100}
    return Scheduler(**{**defaults, **kwargs})


def step(s: Scheduler, now: float = 1.0):
    out = s.schedule(now=now)
    s.update(out, {r.request_id: 7 for r in out.sampling_requests()})
    return out


def finish_running(s: Scheduler) -> None:
    for r in list(s.running):
        s.finish(r, FinishReason.STOP)


def start_order(s: Scheduler, now: float = 1.0) -> list[str]:
    """Run the scheduler to the end, each admitted request finishing at once."""
    order: list[str] = []
    while s.has_work:
        out = step(s, now)
        order.extend(r.request_id for r in out.admitted)
        finish_running(s)
    return order


# --- fair share between tenants ---------------------------------------------------------------


def test_a_tenant_with_a_backlog_cannot_make_another_tenants_few_requests_wait_behind_it():
    s = sched()
    for i in range(40):
        s.add(req(f"a{i}", tenant="a", arrival=0.0 + i * 1e-3))
    step(s)  # four of A's start: the backlog is 36
    for i in range(4):
        s.add(req(f"b{i}", tenant="b", arrival=0.5 + i * 1e-3))
    finish_running(s)
    order = start_order(s)
    a_started_before_last_b = sum(rid.startswith("a") for rid in order[: order.index("b3")])
    assert a_started_before_last_b <= 4  # B's four interleave with A's next four
    assert a_started_before_last_b < 36 / 2


def test_a_higher_priority_tenant_gets_twice_the_share_per_step_of_priority():
    s = sched(n_seq_max=1, max_batch_tokens=8)
    for i in range(30):
        s.add(req(f"hi{i}", tenant="hi", priority=1, arrival=i * 1e-3))
        s.add(req(f"lo{i}", tenant="lo", priority=0, arrival=i * 1e-3))
    first = start_order(s)[:30]
    assert sum(r.startswith("hi") for r in first) == 20
    assert sum(r.startswith("lo") for r in first) == 10


def test_the_weight_mapping_doubles_per_priority_and_is_clamped():
    assert fairshare.tenant_weight(0) == 1
    assert fairshare.tenant_weight(1) == 2
    assert fairshare.tenant_weight(-1) == 0.5
    assert fairshare.tenant_weight(30) == fairshare.tenant_weight(4) == 16


def test_an_idle_tenant_does_not_bank_credit_while_away():
    s = sched(n_seq_max=1, max_batch_tokens=8)
    for i in range(10):  # A alone: ten admissions
        s.add(req(f"a{i}", tenant="a", arrival=i * 1e-3))
    start_order(s)
    for i in range(6):
        s.add(req(f"a{10 + i}", tenant="a", arrival=1 + i * 1e-3))
        s.add(req(f"b{i}", tenant="b", arrival=1 + i * 1e-3))
    order = start_order(s)
    # B was idle for A's ten: it does not now get ten in a row, the two alternate.
    assert order[:4] in (["a10", "b0", "a11", "b1"], ["b0", "a10", "b1", "a11"])


def test_within_a_tenant_a_follow_up_turn_goes_before_a_new_conversation():
    s = sched(n_seq_max=1, max_batch_tokens=8)
    s.add(req("new1", tenant="t", arrival=0.0))
    s.add(req("new2", tenant="t", arrival=0.1))
    s.add(req("turn2", tenant="t", follow_up=True, arrival=0.2))
    assert start_order(s) == ["turn2", "new1", "new2"]


def test_a_request_waiting_past_the_aging_time_goes_first_whatever_the_shares():
    s = sched(n_seq_max=1, max_batch_tokens=8, aging=10.0)
    s.add(req("a-old", tenant="a", arrival=0.0))
    s.add(req("a-newer", tenant="a", arrival=5.0))
    s.waiting.clock.charge("a", 1.0)  # A has been served more than B...
    s.waiting.clock.charge("a", 1.0)
    s.add(req("b", tenant="b", follow_up=True, arrival=11.0))
    # ...so B would go first, but A's oldest request has waited past the aging time. Once it
    # is served, the fair share decides again: B before A's younger request.
    assert start_order(s, now=12.0) == ["a-old", "b", "a-newer"]


def test_without_aging_the_same_queue_follows_the_shares():
    s = sched(n_seq_max=1, max_batch_tokens=8, aging=10.0)
    s.add(req("a-old", tenant="a", arrival=0.0))
    s.waiting.clock.charge("a", 1.0)
    s.waiting.clock.charge("a", 1.0)
    s.add(req("b", tenant="b", arrival=1.0))
    assert start_order(s, now=2.0) == ["b", "a-old"]


def test_background_work_goes_after_every_reply_of_every_tenant():
    s = sched(n_seq_max=2, max_batch_tokens=8)
    title = req("title", tenant="quiet", arrival=0.0)
    title.background = True
    s.add(title)
    s.add(req("a", tenant="busy", arrival=1.0))
    s.add(req("b", tenant="busy", arrival=2.0))
    assert start_order(s, now=3.0) == ["a", "b", "title"]


def test_queue_positions_follow_the_fair_order():
    engine = make_engine(FakeRunner(n_seq_max=1), max_queue=10)
    for i in range(3):
        engine.add_request(
            f"a{i}", [ChatMessage("user", f"a{i}")], SamplingParams(temperature=0), tenant="a"
        )
    engine.add_request("b0", [ChatMessage("user", "b0")], SamplingParams(temperature=0), tenant="b")
    events = engine.step()  # a0 runs; B's request is next, ahead of A's backlog
    positions = {e.request_id: e.position for e in events if isinstance(e, Queued)}
    assert positions == {"b0": 1, "a1": 2, "a2": 3}


# --- the wait bound ---------------------------------------------------------------------------


def test_a_request_waiting_longer_than_the_bound_is_answered_busy_with_a_retry_hint():
    runner = FakeRunner(n_seq_max=1, reply_for=lambda p: "x" * 50)
    engine = make_engine(runner, max_wait=60.0, aging=30.0)
    params = SamplingParams(temperature=0)
    engine.add_request("running", [ChatMessage("user", "one")], params)
    engine.add_request("fresh", [ChatMessage("user", "two")], params)
    engine.add_request("stale", [ChatMessage("user", "three")], params, waited=61.0)
    events = engine.step()
    [busy] = [e for e in events if isinstance(e, Failed)]
    assert busy.request_id == "stale"
    assert busy.code == "busy"
    assert busy.retry_after is not None
    assert busy.retry_after > 0
    assert engine.scheduler.get("stale") is None
    assert engine.stats.errors == {"busy": 1}
    rest: list[Any] = []
    while engine.has_work:
        rest.extend(engine.step())
    assert {e.request_id for e in rest if isinstance(e, Done)} == {"running", "fresh"}


def test_without_a_bound_a_request_waits_for_its_turn():
    engine = make_engine(FakeRunner(n_seq_max=1))
    params = SamplingParams(temperature=0)
    engine.add_request("a", [ChatMessage("user", "one")], params)
    engine.add_request("b", [ChatMessage("user", "two")], params, waited=10_000.0)
    events: list[Any] = []
    while engine.has_work:
        events.extend(engine.step())
    assert {e.request_id for e in events if isinstance(e, Done)} == {"a", "b"}


# --- the speed floor --------------------------------------------------------------------------


def cost(decode: int, prefill: int) -> float:
    """This machine's step time as measured: 45 ms, 6 ms per decode token, 4 per prompt token."""
    return 0.045 + 0.006 * decode + 0.004 * prefill


def test_the_governor_admits_as_many_streams_as_keep_the_floor():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    assert g.limit() == 16  # nothing measured yet
    for i in range(200):
        decode = 8 + i % 24
        prefill = 64 if i % 10 == 0 else 0
        g.observe(decode_tokens=decode, prefill_tokens=prefill, seconds=cost(decode, prefill))
    # 1/(5 x headroom) s = 0.045 + 0.006 N + 0.004 * (mean prompt tokens per step, about 6):
    # N = 17 (22 with no headroom).
    mean_prompt = g.model.mean_prompt
    assert 4 < mean_prompt < 8
    target = 5.0 * HEADROOM
    assert g.limit() == int((1 / target - 0.045 - 0.004 * mean_prompt) / 0.006) == 17
    speed = g.stream_speed(17)
    assert speed is not None
    assert speed >= target
    speed = g.stream_speed(18)
    assert speed is not None
    assert speed < target


def test_a_lower_floor_admits_more_streams_and_none_is_capped_at_the_maximum():
    def trained(floor: float, maximum: int = 48) -> SpeedGovernor:
        g = SpeedGovernor(floor=floor, maximum=maximum, initial=16)
        for i in range(200):
            decode, prefill = 4 + i % 40, (i * 7) % 3
            g.observe(decode_tokens=decode, prefill_tokens=prefill, seconds=cost(decode, prefill))
        return g

    def expected(g: SpeedGovernor) -> int:
        return int((1 / (g.floor * HEADROOM) - 0.045 - 0.004 * g.model.mean_prompt) / 0.006)

    five, four = trained(5.0), trained(4.0)
    assert five.limit() == expected(five) == 20
    assert four.limit() == expected(four) == 28
    assert trained(2.0).limit() == 48
    assert trained(0.0, maximum=40).limit() == 40  # the policy off: always the maximum


def test_a_slow_machine_still_serves_one_stream():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    for _ in range(MIN_STEPS):
        g.observe(decode_tokens=1, prefill_tokens=0, seconds=1.0)
    assert g.limit() == 1


def test_the_engine_admits_more_than_the_initial_sequences_while_streams_keep_the_floor():
    runner = FakeRunner(n_seq_max=48, n_ctx=100_000, reply_for=lambda p: "y" * 60)
    runner.step_seconds = cost
    engine = make_engine(runner, max_batch_tokens=256, max_queue=64, min_stream_speed=5.0)
    for i in range(60):
        engine.add_request(f"r{i}", [ChatMessage("user", f"q{i}")], SamplingParams(temperature=0))
    most = 0
    while engine.has_work:
        engine.step()
        most = max(most, engine.num_running)
    # More than the 16 it started with; never more than 25, where a step of decodes alone
    # takes 1/5 s (prompt tokens in some steps lower it further).
    assert 16 < most <= 25


def test_the_engine_runs_fewer_streams_when_steps_get_slower():
    runner = FakeRunner(
        n_seq_max=48, n_ctx=100_000, reply_for=lambda p: "y" * (40 + 37 * int(p[1:]) % 160)
    )
    runner.step_seconds = cost
    engine = make_engine(
        runner, max_batch_tokens=256, max_queue=64, min_stream_speed=5.0, initial_running=4
    )
    for i in range(60):
        engine.add_request(f"r{i}", [ChatMessage("user", f"q{i}")], SamplingParams(temperature=0))
    for _ in range(80):
        engine.step()
    assert engine.num_running > 16  # fast steps: more than 16 streams keep 5 tokens/s
    runner.step_seconds = lambda d, p: 2 * cost(d, p)  # the machine gets twice as slow
    steps = 0
    while engine.has_work and engine.num_running > 9:
        engine.step()  # running streams are never preempted; finished ones are not replaced
        steps += 1
    assert engine.has_work
    assert engine.governor.limit() <= 9  # 2 x (0.045 + 0.006 N) <= 1/5 s: N = 9
    while engine.has_work:
        engine.step()
        assert engine.num_running <= 9


def test_the_floor_counts_the_whole_step_not_only_llama_decode():
    # Each step spends 30 ms in all (KV moves, sampling, the worker's publishing) of which
    # llama_decode reports 5: streams see 30 ms steps, so the plan must too.
    runner = FakeRunner(n_seq_max=8, step_delay=0.03, reply_for=lambda p: "y" * 200)
    runner.step_seconds = lambda d, p: 0.005
    engine = make_engine(runner, min_stream_speed=5.0, initial_running=2)
    engine.add_request("r", [ChatMessage("user", "q")], SamplingParams(temperature=0))
    for _ in range(30):
        engine.step()
    speed = engine.governor.stream_speed(1)
    assert speed is not None
    assert speed < 1 / 0.03  # not the 200 tokens/s llama_decode alone would promise


def test_the_floor_never_runs_fewer_than_the_initial_sequences():
    runner = FakeRunner(n_seq_max=48, n_ctx=100_000, reply_for=lambda p: "y" * 100)
    runner.step_seconds = lambda d, p: 10 * cost(d, p)  # far too slow for 5 tokens/s
    engine = make_engine(runner, max_batch_tokens=256, max_queue=64, min_stream_speed=5.0)
    for i in range(30):
        engine.add_request(f"r{i}", [ChatMessage("user", f"q{i}")], SamplingParams(temperature=0))
    for _ in range(60):
        engine.step()
        assert engine.num_running <= 16
    assert engine.governor.limit() == 16  # slower streams, but no longer queues than before


# --- tenant isolation of KV reuse -------------------------------------------------------------

SYSTEM = [50 + i for i in range(40)]


def test_a_kept_sequence_is_never_reused_for_another_tenant():
    s = sched(n_seq_max=1)
    a = req("a", tenant="acme", prompt=[*SYSTEM, 1])
    s.add(a)
    step(s)
    s.finish(a, FinishReason.STOP)
    b = req("b", tenant="globex", prompt=[*SYSTEM, 2])
    s.add(b)
    out = step(s)
    assert b.num_cached == 0
    assert out.kv_ops == [KvOp(0, keep=0)]


def test_a_prefix_is_copied_only_from_the_same_tenant():
    s = sched(n_seq_max=3)
    a = req("a", tenant="acme", prompt=[*SYSTEM, 1], max_tokens=50)
    s.add(a)
    step(s)
    other = req("other", tenant="globex", prompt=[*SYSTEM, 2])
    s.add(other)
    out = step(s)
    assert other.num_cached == 0
    assert not any(getattr(op, "copy_from", None) is not None for op in out.kv_ops)
    same = req("same", tenant="acme", prompt=[*SYSTEM, 3])
    s.add(same)
    out = step(s)
    assert same.num_cached == len(SYSTEM)
    assert KvOp(same.seq_id, 0, copy_from=a.seq_id, copy_len=len(SYSTEM)) in out.kv_ops


def test_requests_without_a_tenant_share_prefixes_only_with_each_other():
    s = sched(n_seq_max=3)
    a = req("a", tenant="", prompt=[*SYSTEM, 1], max_tokens=50)
    s.add(a)
    step(s)
    named = req("named", tenant="acme", prompt=[*SYSTEM, 2], max_tokens=50)
    s.add(named)
    step(s)
    unnamed = req("unnamed", tenant="", prompt=[*SYSTEM, 3])
    s.add(unnamed)
    step(s)
    assert named.num_cached == 0
    assert unnamed.num_cached == len(SYSTEM)


def test_the_engine_never_reuses_another_tenants_system_prompt():
    runner = FakeRunner(n_seq_max=2)
    engine = make_engine(runner)
    system = ChatMessage("system", "You are the assistant of Acme. " * 4)
    params = SamplingParams(temperature=0)
    engine.add_request("acme1", [system, ChatMessage("user", "hi")], params, tenant="acme")
    engine.step()
    engine.add_request("globex", [system, ChatMessage("user", "yo")], params, tenant="globex")
    engine.add_request("acme2", [system, ChatMessage("user", "ho")], params, tenant="acme")
    done: dict[str, Done] = {}
    while engine.has_work:
        done.update({e.request_id: e for e in engine.step() if isinstance(e, Done)})
    assert done["globex"].cached_tokens == 0
    assert done["acme2"].cached_tokens > len(system.content)


# --- the host-memory cache ---------------------------------------------------------------------


def conversation_engine(*, host_bytes: int, n_seq_max: int = 2, **kwargs: Any):
    runner = FakeRunner(
        n_seq_max=n_seq_max,
        reply_for=lambda p: f"answer to {p}",
        host_budget_bytes=host_bytes,
        **kwargs,
    )
    engine = make_engine(runner, host_cache_bytes=host_bytes, max_queue=32)
    return runner, engine


def talk(engine, rid, history, text, tenant="t"):
    messages = [*history, ChatMessage("user", text)]
    engine.add_request(rid, messages, SamplingParams(temperature=0), tenant=tenant)
    reply, done = "", None
    while engine.has_work:
        for e in engine.step():
            if isinstance(e, Delta):
                reply += e.text
            elif isinstance(e, Done):
                done = e
    assert done is not None
    return [*messages, ChatMessage("assistant", reply)], done


def test_a_conversation_whose_sequence_was_taken_restores_from_host_memory():
    runner, engine = conversation_engine(host_bytes=1_000_000, n_seq_max=1)
    alice, first = talk(engine, "a1", [], "tell me about the sea, please")
    _bob, _ = talk(engine, "b1", [], "what is the time in Paris now?")  # takes the one sequence
    assert [s.n_tokens for s in runner.saves] == [first.prompt_tokens + first.completion_tokens]
    _, second = talk(engine, "a2", alice, "and the mountains?")
    # The whole first turn comes back from host memory; only the new message is computed.
    assert runner.restores
    assert runner.restores[0].entry == runner.saves[0].entry
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens
    assert engine.stats.restored_tokens == second.cached_tokens
    assert engine.stats.follow_ups == engine.stats.follow_ups_warm == 1
    assert engine.status()["host_cache_bytes"] == runner.saved_bytes > 0


def test_an_idle_conversation_leaves_its_sequence_for_host_memory_and_comes_back_warm():
    runner = FakeRunner(n_seq_max=4, reply_for=lambda p: f"answer to {p}")
    engine = make_engine(runner, host_cache_bytes=1_000_000, max_queue=32, park_idle_steps=3)
    alice, first = talk(engine, "a1", [], "tell me about the sea, please")
    alice_seq = next(s for s in engine.scheduler.slots if s.tokens)
    held = first.prompt_tokens + first.completion_tokens
    assert len(alice_seq.tokens) == held  # kept in place while it may continue at once
    # Someone else talks for more than three steps: alice's KV moves out, her cells are freed.
    talk(engine, "b1", [], "what is the time in Paris now? Tell me in detail, please")
    assert [s.n_tokens for s in runner.saves] == [held]
    assert runner.saves[0].seq_id == alice_seq.seq_id
    assert runner.kv[alice_seq.seq_id] == []
    assert not alice_seq.tokens
    _, second = talk(engine, "a2", alice, "and the mountains?")
    assert runner.restores[-1].entry == runner.saves[0].entry
    assert second.cached_tokens == held  # the whole history, only the new message computed
    assert engine.stats.follow_ups_warm == 1


def test_a_quick_follow_up_continues_in_its_sequence_without_a_round_trip():
    runner = FakeRunner(n_seq_max=4, reply_for=lambda p: f"answer to {p}")
    engine = make_engine(runner, host_cache_bytes=1_000_000, max_queue=32, park_idle_steps=50)
    alice, first = talk(engine, "a1", [], "tell me about the sea, please")
    _, second = talk(engine, "a2", alice, "and the mountains?")
    assert not runner.saves
    assert not runner.restores
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens


def test_without_host_memory_an_idle_conversation_stays_in_its_sequence():
    runner = FakeRunner(n_seq_max=4, reply_for=lambda p: f"answer to {p}")
    engine = make_engine(runner, max_queue=32, park_idle_steps=1)
    alice, first = talk(engine, "a1", [], "tell me about the sea, please")
    talk(engine, "b1", [], "what is the time in Paris now? Tell me in detail, please")
    _, second = talk(engine, "a2", alice, "and the mountains?")
    assert not runner.saves
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens


def test_an_idle_conversation_host_memory_cannot_hold_stays_in_its_sequence():
    s = sched(host_cache_tokens=20, park_idle_steps=1)
    s.add(req("long", prompt=[100 + i for i in range(30)]))
    step(s)
    finish_running(s)
    s.add(req("other"))
    for _ in range(3):
        out = step(s)
        assert not [op for op in out.kv_ops if isinstance(op, SaveKv)]
    assert len(s.slots[0].tokens) == 30


def test_a_restored_conversation_shares_the_system_prompt_cells_a_running_one_holds():
    runner = FakeRunner(n_seq_max=4, reply_for=lambda p: "an answer of a few words " * 3)
    engine = make_engine(runner, host_cache_bytes=1_000_000, max_queue=32, park_idle_steps=2)
    system = ChatMessage("system", "You are the assistant of the Acme company. " * 2)
    alice, _ = talk(engine, "a1", [system], "tell me about the sea, please")
    # Bob starts while alice is away: her KV goes to host memory meanwhile.
    bob_asks = [system, ChatMessage("user", "hello")]
    engine.add_request("b1", bob_asks, SamplingParams(temperature=0), tenant="t")
    for _ in range(4):
        engine.step()
    assert runner.saves
    bob = engine.scheduler.get("b1")
    assert bob is not None
    assert not bob.status.is_finished
    _, again = talk(engine, "a2", alice, "and the mountains?")
    # Alice's history came back from host memory, and the prefix bob's sequence holds (the
    # system prompt) is bob's cells, not a second copy; the fake checked they hold the same
    # tokens, and at every sample that alice's sequence held exactly her conversation.
    assert runner.restores[-1].entry == runner.saves[0].entry
    share = runner.shares[-1]
    assert (share.seq_id, share.source) == (runner.restores[-1].seq_id, bob.seq_id)
    assert share.n_tokens >= len(runner.tokenize(system.content))
    assert again.finish_reason == "stop"


def test_cheaper_prompts_admitted_with_another_tenants_do_not_take_every_first_token():
    # Tenant a's prompt is cached (a kept sequence holds it), tenant b's is not: admitted in
    # the same step, in this order, b's first token must not wait behind all of a's.
    prompt = [100 + i for i in range(42)]
    s = sched(n_seq_max=8, max_batch_tokens=256, policy="fcfs")
    s.add(req("a0", tenant="a", prompt=prompt))
    step(s)
    finish_running(s)
    for rid in ("b1", "a1", "b2", "a2", "a3"):
        s.add(req(rid, tenant=rid[0], prompt=prompt))
    s.prompt_budget = 0  # as while streams decode: short prompts go in beyond the budget
    first = step(s)
    assert [r.request_id for r in first.admitted] == ["b1", "a1", "b2", "a2", "a3"]
    completed = [c.request.request_id for c in first.prefills if c.completes_prompt]
    assert completed == ["b1", "a1"]  # b2 did not fit whole: a2 and a3 do not jump it
    second = step(s)
    completed = [c.request.request_id for c in second.prefills if c.completes_prompt]
    assert completed[0] == "b2"


def long_idle_conversation(s: Scheduler, n: int) -> None:
    s.add(req("long", prompt=[100 + i % 50 for i in range(n)]))
    step(s)
    finish_running(s)


def test_the_pool_is_packed_once_more_cells_were_freed_than_are_in_use():
    s = sched(max_batch_tokens=4096, host_cache_tokens=100_000, park_idle_steps=1)
    long_idle_conversation(s, COMPACT_MIN_FREED + 100)
    s.add(req("other", prompt=[7] * 40, max_tokens=50))
    out = step(s)  # the idle conversation goes to host memory, its cells are freed
    kinds = [type(op) for op in out.kv_ops]
    assert kinds[-1] is CompactKv  # after the moves that free and fill cells, before the batch
    assert kinds.index(SaveKv) < kinds.index(KvOp) < kinds.index(CompactKv)
    assert s.compactions == 1
    for _ in range(5):  # nothing more was freed: never packed again for nothing
        assert not any(isinstance(op, CompactKv) for op in step(s).kv_ops)


def test_with_packing_off_the_pool_is_never_packed():
    s = sched(max_batch_tokens=4096, host_cache_tokens=100_000, park_idle_steps=1, compact=False)
    long_idle_conversation(s, COMPACT_MIN_FREED + 100)
    s.add(req("other", prompt=[7] * 40, max_tokens=50))
    out = step(s)
    assert any(isinstance(op, SaveKv) for op in out.kv_ops)  # parked all the same
    assert not any(isinstance(op, CompactKv) for op in out.kv_ops)


def test_the_pool_is_not_packed_while_fewer_cells_were_freed_than_are_in_use():
    s = sched(max_batch_tokens=8192, host_cache_tokens=100_000, park_idle_steps=1)
    s.add(req("busy", prompt=[9] * (COMPACT_MIN_FREED + 500), max_tokens=50))
    step(s)
    long_idle_conversation(s, COMPACT_MIN_FREED + 100)
    for _ in range(3):
        assert not any(isinstance(op, CompactKv) for op in step(s).kv_ops)
    assert s.compactions == 0
    assert not s.slots[1].tokens  # the idle conversation did leave its sequence


def test_a_pool_lost_while_packing_ends_the_running_requests_and_forgets_kept_kv():
    runner = FakeRunner(
        n_seq_max=4, n_ctx=16_384, max_seq_tokens=4096, reply_for=lambda p: "a long answer " * 20
    )
    engine = make_engine(runner, host_cache_bytes=10_000_000, max_queue=32, park_idle_steps=1)
    alice, _ = talk(engine, "a1", [], "x" * (COMPACT_MIN_FREED + 10))
    runner.fail_compaction = True
    engine.add_request("b1", [ChatMessage("user", "hi")], SamplingParams(temperature=0))
    events = engine.step()
    failed = [e for e in events if isinstance(e, Failed)]
    assert [(e.request_id, e.code) for e in failed] == [("b1", "internal")]
    assert not engine.has_work
    assert not any(slot.tokens for slot in engine.scheduler.slots)
    runner.fail_compaction = False
    # Nothing stale is reused: alice's history comes back from host memory, checked token by
    # token by the fake at every sample.
    _, again = talk(engine, "a2", alice, "and then?")
    assert again.finish_reason == "stop"
    assert again.cached_tokens > COMPACT_MIN_FREED


def test_a_regenerated_turn_restores_only_the_common_prefix():
    runner, engine = conversation_engine(host_bytes=1_000_000, n_seq_max=1)
    history, _ = talk(engine, "a1", [], "tell me about the sea, please")
    long_history, _ = talk(engine, "a2", history, "and the mountains?")
    talk(engine, "b1", [], "what is the time in Paris now?")  # a's sequence is saved
    # Regenerate turn 2 with another question: only turn 1 and the template are shared.
    _, redo = talk(engine, "a2-redo", history, "and the rivers instead?")
    restored = runner.restores[-1]
    old = runner.tokenize_parts(runner.render_prompt(long_history[:-1]))
    new = runner.tokenize_parts(runner.render_prompt([*history, ChatMessage("user", "and the r")]))
    common = next(i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y)
    assert restored.n_tokens > len(old)  # the whole old turn 2 was saved...
    assert redo.cached_tokens == common  # ...and only the common prefix is kept of it
    # The fake checked at every sample that the sequence held exactly this prompt and reply.
    assert redo.finish_reason == "stop"


def test_entries_beyond_the_budget_are_dropped_least_recently_used_first_and_recomputed():
    # Room for about one saved conversation only.
    runner, engine = conversation_engine(host_bytes=9_000, n_seq_max=1)
    a, _a1 = talk(engine, "a1", [], "tell me about the sea, please", tenant="t")
    talk(engine, "b1", [], "what is the time in Paris now?", tenant="t")  # a saved
    c, c1 = talk(engine, "c1", [], "how do I bake bread at home?", tenant="t")  # b saved, a gone
    assert len(runner.saved) == 1
    assert runner.saved_bytes <= 9_000
    restores = len(runner.restores)
    _, a2 = talk(engine, "a2", a, "and the mountains?")  # c saved, b dropped (older)
    assert len(runner.restores) == restores  # gone from host memory: recomputed, correctly,
    held = runner.tokenize_parts(runner.render_prompt(c))
    asked = runner.tokenize_parts(runner.render_prompt([*a, ChatMessage("user", "and the m")]))
    assert 0 < a2.cached_tokens == common_prefix_len(held, asked)  # but the template's opening
    assert a2.finish_reason == "stop"
    _, c2 = talk(engine, "c2", c, "and cakes?")
    assert c2.cached_tokens == c1.prompt_tokens + c1.completion_tokens  # restored


def test_host_entries_are_never_restored_for_another_tenant():
    runner, engine = conversation_engine(host_bytes=1_000_000, n_seq_max=1)
    history, _ = talk(engine, "a1", [], "tell me about the sea, please", tenant="acme")
    talk(engine, "b1", [], "what is the time in Paris now?", tenant="acme")
    _, other = talk(engine, "x", history, "and the mountains?", tenant="globex")
    assert other.cached_tokens == 0
    assert not runner.restores


def test_with_the_host_cache_off_nothing_is_saved():
    runner, engine = conversation_engine(host_bytes=0, n_seq_max=1)
    history, _ = talk(engine, "a1", [], "tell me about the sea, please")
    b, _ = talk(engine, "b1", [], "what is the time in Paris now?")
    _, second = talk(engine, "a2", history, "and the mountains?")
    assert not runner.saves
    assert not runner.restores
    held = runner.tokenize_parts(runner.render_prompt(b))
    asked = runner.tokenize_parts(runner.render_prompt([*history, ChatMessage("user", "x")]))
    # Only the template's opening, which b's sequence shares, is not computed again.
    assert second.cached_tokens == common_prefix_len(held, asked) < 10


def test_a_failed_restore_is_recomputed_and_nobody_else_in_the_batch_notices():
    runner, engine = conversation_engine(host_bytes=1_000_000, n_seq_max=2)
    history, first = talk(engine, "a1", [], "tell me about the sea, please")
    talk(engine, "b1", [], "what is the time in Paris now?")
    talk(engine, "c1", [], "how do I bake bread at home?")  # a's sequence saved, then taken
    assert runner.saves
    runner.fail_restores = True  # llama_state_seq_set_data refuses the state, say
    messages = [*history, ChatMessage("user", "and the mountains?")]
    engine.add_request("a2", messages, SamplingParams(temperature=0), tenant="t")
    engine.add_request(
        "d1", [ChatMessage("user", "a fresh one")], SamplingParams(temperature=0), tenant="u"
    )
    events = engine.step()
    assert not any(isinstance(e, Failed) for e in events)
    assert engine.stats.restore_failures == 1
    runner.fail_restores = False
    done = {}
    reply = ""
    while engine.has_work:
        for e in engine.step():
            if isinstance(e, Done):
                done[e.request_id] = e
            elif isinstance(e, Delta) and e.request_id == "a2":
                reply += e.text
    # Both finish; the fake checked at every sample that each sequence held exactly its own
    # prompt and reply, so the recomputed one did not decode on the failed state.
    assert {r: d.finish_reason for r, d in done.items()} == {"a2": "stop", "d1": "stop"}
    assert reply == "answer to and the mountains?"
    assert done["a2"].cached_tokens < first.prompt_tokens  # not restored: recomputed
    assert engine.stats.restored_tokens == 0  # the failed restore is not counted


def test_restore_decisions_come_before_the_batch_that_uses_them():
    s = sched(n_seq_max=1, host_cache_tokens=1000)
    first = req("first", tenant="t", prompt=list(range(100, 160)))
    s.add(first)
    step(s)
    s.finish(first, FinishReason.STOP)
    other = req("other", tenant="t", prompt=list(range(500, 540)))
    s.add(other)
    out = step(s)
    assert out.kv_ops[0] == SaveKv(0, 1, 60)
    s.finish(other, FinishReason.STOP)
    back = req("back", tenant="t", prompt=[*range(100, 160), 7, 8, 9])
    s.add(back)
    out = step(s)
    assert RestoreKv(0, 1, 60) in out.kv_ops
    assert out.kv_ops[-1] == KvOp(0, keep=60)
    assert back.num_restored == 60
    assert out.prefills[0].start == 60
    assert back.status is RequestStatus.RUNNING


def sixteen_streams(reply_chars: int, warm_steps: int) -> tuple[FakeRunner, Engine, SamplingParams]:
    """Sixteen streams replying `reply_chars` characters, run `warm_steps` steps on this
    machine's measured step times (`cost`), so the engine has learned them."""
    runner = FakeRunner(
        n_seq_max=32,
        n_ctx=100_000,
        reply_for=lambda p: "y" * (reply_chars if p.startswith("s") else 5),
    )
    runner.step_seconds = cost
    engine = make_engine(runner, max_batch_tokens=256, max_queue=64)
    params = SamplingParams(temperature=0)
    for i in range(16):
        engine.add_request(f"s{i}", [ChatMessage("user", f"s{i}")], params)
    for _ in range(warm_steps):
        engine.step()
    return runner, engine, params


def test_a_long_prompt_is_spread_so_running_streams_steps_stay_within_their_stretch():
    runner, engine, params = sixteen_streams(300, 40)
    assert engine.num_running == 16
    assert engine.add_request("long", [ChatMessage("user", "x" * 900)], params) == []
    decode_only = cost(16, 0)
    chunks = []
    long = engine.scheduler.get("long")
    assert long is not None
    while not long.output_tokens:
        engine.step()
        batch = runner.batches[-1]
        chunk = sum(n for rid, n in batch.prefills if rid == "long")
        if chunk:
            chunks.append(chunk)
            assert len(batch.decodes) == 16  # every stream got its token in that step too
            # Within STRETCH times the decode-only time (an estimate: 3% slack).
            assert cost(len(batch.decodes), chunk) <= STRETCH * decode_only * 1.03
    assert sum(chunks) > 900  # the whole prompt, in many small chunks
    # 0.6 * 0.141 s / 0.004 s: a step of STRETCH (1.6) times the decode-only time.
    assert max(chunks) in (21, 22)


def test_prompt_chunks_that_cost_more_than_planned_shrink_the_next_ones():
    # The line is learned on decode steps and short prompts; then a long prompt's chunks cost
    # more per token the further they are into it (each token attends over all before it).
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    for _ in range(10):  # the sixteen streams decoding alone
        g.observe(decode_tokens=16, prefill_tokens=0, seconds=cost(16, 0))
    decode_only = cost(16, 0)
    first = g.prompt_allowance(16, 256)
    assert first in (21, 22)  # planned for STRETCH times the decode-only time
    ratios, position = [], 0
    for _ in range(40):
        chunk = g.prompt_allowance(16, 256)
        seconds = decode_only + 0.004 * chunk * (1 + position / 300)
        ratios.append(seconds / decode_only)
        g.observe(decode_tokens=16, prefill_tokens=chunk, seconds=seconds)
        position += chunk
    # Each step is planned on what the last ones measured: the streams' steps stay within
    # STRETCH (a few percent for the cost that grew since), while the chunks shrink.
    assert max(ratios) <= STRETCH * 1.05
    assert g.prompt_allowance(16, 256) < first / 2


def test_a_long_prompt_left_alone_gets_whole_steps():
    runner, engine, params = sixteen_streams(40, 25)
    engine.add_request("long", [ChatMessage("user", "x" * 900)], params)
    while engine.has_work:
        engine.step()
    chunks = [n for batch in runner.batches for rid, n in batch.prefills if rid == "long"]
    beside_streams = [
        n
        for batch in runner.batches
        for rid, n in batch.prefills
        if rid == "long" and batch.decodes
    ]
    assert max(beside_streams) <= 22  # small chunks while the streams decode
    assert max(chunks) == 256  # then, alone (it decodes nothing yet), whole steps


def test_with_nothing_running_a_prompt_gets_the_whole_step():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    assert g.prompt_allowance(0, 256) == 256
    assert g.prompt_allowance(16, 256) in (21, 22)  # 0.6 * 0.141 s of prompt tokens at 4 ms
    no_floor = SpeedGovernor(floor=0.0, maximum=48, initial=16, model=g.model)
    assert no_floor.prompt_allowance(1, 256) == 8  # never below a minimum chunk: prompts progress


def test_beside_streams_faster_than_the_floor_prompts_may_slow_them_down_to_it():
    # One stream decodes in 51 ms: held to 1.6 times that, a prompt would get 7 tokens a step
    # (8, the minimum) and pay a whole step's fixed cost for them; the floor's step is 174 ms.
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16, ttft_target=2.0, hard_floor=2.5)
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    chunk = g.prompt_allowance(1, 256)
    assert chunk in (30, 31)  # (1 / (5 x 1.15) - 0.051 s) / 4 ms
    assert 1 / cost(1, chunk) >= 5.0 * HEADROOM * 0.97  # the stream keeps the floor
    # While the floor yields to someone waiting in the queue: down to the hard minimum.
    g.yielding = True
    yielded = g.prompt_allowance(1, 256)
    assert yielded in (73, 74)  # (1 / (2.5 x 1.15) - 0.051 s) / 4 ms
    assert 1 / cost(1, yielded) >= 2.5 * HEADROOM * 0.97
    g.yielding = False
    # Sixteen streams are at the floor already: the stretch bound is the larger one.
    assert g.prompt_allowance(16, 256) in (21, 22)


def learned_governor() -> SpeedGovernor:
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16, ttft_target=2.0, hard_floor=2.5)
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    return g


def test_a_prompt_that_makes_its_first_token_target_in_the_floors_chunks_keeps_them():
    g = learned_governor()
    # 100 tokens, 2 s left: 4 steps of 30 tokens (174 ms each) are well within it.
    assert g.prompt_allowance(1, 256, due=[(100, 2.0)]) in (30, 31)


def test_a_prompt_gets_the_chunks_that_bring_its_first_token_within_the_target():
    g = learned_governor()
    # 300 tokens with 2 s left, beside one stream (51 ms a step): the tokens take 1.2 s, which
    # leaves 0.8 s of the streams' own step time: 15 steps, so 20 tokens a step at least.
    # The floor's 30 are more: it keeps them.
    assert g.prompt_allowance(1, 256, due=[(300, 2.0)]) in (30, 31)
    # 400 tokens with 2 s left: 1.6 s of tokens, 0.4 s for 7 steps: 58 tokens a step.
    chunk = g.prompt_allowance(1, 256, due=[(400, 2.0)])
    assert chunk == 58
    steps = -(-400 // chunk)
    assert steps * cost(1, 0) + 400 * 0.004 <= 2.0  # its first token within the target
    # The stream slows below the floor for it, not to a standstill: ~3.6 tokens/s.
    assert 1 / cost(1, chunk) < 5.0


def test_a_prompt_waits_for_the_ones_computed_before_it():
    g = learned_governor()
    # Alone, 200 tokens with 1.5 s left fit the floor's chunks; behind another reply's 150
    # they are 350 tokens to compute within its 1.5 s: 0.1 s left for 1 step of streams.
    assert g.prompt_allowance(1, 256, due=[(200, 1.5)]) in (30, 31)
    assert g.prompt_allowance(1, 256, due=[(150, 1.9), (200, 1.5)]) == 256


def test_a_prompt_that_cannot_make_the_target_or_is_late_already_gets_whole_steps():
    g = learned_governor()
    assert g.prompt_allowance(1, 256, due=[(720, 2.0)]) == 256  # 2.9 s of tokens alone
    assert g.prompt_allowance(1, 256, due=[(40, -0.5)]) == 256  # waited past the target
    assert g.prompt_allowance(16, 256, due=[(0, -1.0)]) in (21, 22)  # nothing left to compute
    no_target = SpeedGovernor(floor=5.0, maximum=48, initial=16, model=g.model)
    assert no_target.prompt_allowance(1, 256, due=[(720, 2.0)]) in (30, 31)  # the floor's


def one_stream_with_a_floor() -> tuple[FakeRunner, Engine, SamplingParams]:
    """One long reply streaming on this machine's step times, under the product's floor (5
    tokens/s, yielding to 2.5 once a reply has waited 2 s), the line learned."""
    runner = FakeRunner(
        n_seq_max=32,
        n_ctx=100_000,
        reply_for=lambda p: "y" * (2000 if p.startswith("s") else 5),
    )
    runner.step_seconds = cost
    engine = make_engine(
        runner,
        max_batch_tokens=256,
        max_queue=64,
        min_stream_speed=5.0,
        hard_min_stream_speed=2.5,
        ttft_target=2.0,
    )
    params = SamplingParams(temperature=0, max_tokens=4000)
    engine.add_request("s0", [ChatMessage("user", "s0")], params)
    for i in range(30):  # the line needs steps of several shapes
        engine.add_request(f"w{i}", [ChatMessage("user", "x" * (i % 5))], params)
        engine.step()
        engine.step()
    return runner, engine, params


def chunks_of(runner: FakeRunner, rid: str) -> list[int]:
    return [n for batch in runner.batches for r, n in batch.prefills if r == rid and batch.decodes]


def test_a_prompt_beside_one_fast_stream_is_computed_in_chunks_the_floor_allows():
    runner, engine, params = one_stream_with_a_floor()
    # 200 tokens: in the floor's chunks its first word comes well within the 2 s target.
    engine.add_request("long", [ChatMessage("user", "x" * 200)], params)
    engine.step()
    engine.step()
    chunk = max(chunks_of(runner, "long"))
    assert chunk >= 25  # not the 8 tokens that 1.6 times one stream's 51 ms step allows
    assert 1 / cost(1, chunk) >= 5.0  # the stream keeps the floor


def test_a_prompt_that_waited_past_the_first_token_target_gets_whole_steps():
    runner, engine, params = one_stream_with_a_floor()
    engine.add_request("late", [ChatMessage("user", "x" * 600)], params, waited=3.0)
    for _ in range(3):
        engine.step()
    # From its second step (the first is planned before it is admitted), the step is the
    # prompt's: all of the 256-token budget but the stream's decode token.
    assert prompt_share(runner, "late")[1:3] == [256, 256]


def test_a_prompt_too_long_for_the_first_token_target_gets_whole_steps():
    runner, engine, params = one_stream_with_a_floor()
    # 900 tokens at 4 ms are 3.6 s: it cannot make the 2 s target, so it waits no longer.
    engine.add_request("long", [ChatMessage("user", "x" * 900)], params)
    for _ in range(3):
        engine.step()
    assert prompt_share(runner, "long")[1:3] == [256, 256]


def prompt_share(runner: FakeRunner, rid: str) -> list[int]:
    """The tokens of `rid`'s prompt in each step that also decoded, plus those decodes: the
    step's whole budget when the prompt took whole steps."""
    return [
        n + len(batch.decodes)
        for batch in runner.batches
        for r, n in batch.prefills
        if r == rid and batch.decodes
    ]


def test_prompt_tokens_measured_as_free_leave_the_whole_step_to_prompts():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    for i in range(100):  # step time depends on decode tokens only
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, 0))
    assert g.prompt_allowance(16, 256) == 256


def test_background_prompts_get_about_one_decode_step_of_tokens():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    assert g.background_allowance(4, 256) == 8  # not measured yet: a small chunk
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    # One stream's decode step is 51 ms, 12 prompt tokens at 4 ms; with 16 streams, 141 ms.
    assert g.background_allowance(0, 256) in (12, 13)
    assert g.background_allowance(16, 256) in (35, 36)
    assert g.background_allowance(16, 20) == 20  # never more than the step's budget


def test_with_no_reply_running_or_waiting_background_prompts_get_a_quarter_second():
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    assert g.background_allowance(0, 256, idle=True) == 64  # before anything was measured
    for i in range(100):  # a fast machine: 1 ms a prompt token
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=fast(4 + i % 20, i % 7))
    assert g.background_allowance(0, 256, idle=True) in (249, 250)  # 0.25 s at 1 ms a token
    assert g.background_allowance(0, 40, idle=True) == 40  # never more than the step's budget


def test_idle_background_chunks_never_go_below_the_efficient_size():
    # 0.25 s at 4 ms a token would be 62 tokens; chunks that small lose a third of the machine
    # to the step's fixed cost, so a slow machine's idle chunks take a little longer instead.
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    for i in range(100):
        g.observe(decode_tokens=4 + i % 20, prefill_tokens=i % 7, seconds=cost(4 + i % 20, i % 7))
    assert g.background_allowance(0, 256, idle=True) == 64
    assert g.background_allowance(4, 256) in (16, 17)  # a reply running: one decode step's


def test_idle_background_chunks_grow_from_what_their_own_steps_measure():
    # A worker computing passage KV before anyone asks, on a fast machine: every step is a
    # background prompt's chunk, so the line cannot tell a step's fixed 15 ms from its tokens'
    # 1 ms each.
    g = SpeedGovernor(floor=5.0, maximum=48, initial=16)
    chunks = []
    for _ in range(200):
        chunk = g.background_allowance(0, 256, idle=True)
        chunks.append(chunk)
        g.observe(decode_tokens=0, prefill_tokens=chunk, seconds=fast(0, chunk))
    # The fixed cost is charged to the tokens at first; the chunks grow from the floor towards
    # the quarter second's (0.25 - 0.015) / 0.001 = 235 tokens and stay within it.
    assert chunks[0] == 64
    assert chunks[-1] >= 200
    assert max(fast(0, c) for c in chunks) <= 0.25 * 1.05


def fast(decode: int, prefill: int) -> float:
    """A faster machine's step: 15 ms, 2 ms per decode token, 1 per prompt token."""
    return 0.015 + 0.002 * decode + 0.001 * prefill
