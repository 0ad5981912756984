"""KV placement without a model: the host cache's disk tier and a stream of KV cells per
sequence (decisions checked by the strict fake; split from test_policies.py)."""

from typing import Any

from inference.engine import Engine
from inference.scheduler import KvOp, SaveKv, Scheduler
from inference.types import (
    ChatMessage,
    Delta,
    Done,
    Failed,
    FinishReason,
    Request,
    SamplingParams,
)
from tests.fakes import TRUSTED, FakeRunner, make_engine
from tests.inference.test_policies import conversation_engine, sixteen_streams, talk


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


# --- the host cache's disk tier ----------------------------------------------------------------


def disk_engine(*, host_bytes: int, disk_bytes: int, n_seq_max: int = 1, **kwargs: Any):
    runner = FakeRunner(
        n_seq_max=n_seq_max,
        reply_for=lambda p: f"answer to {p}",
        host_budget_bytes=host_bytes,
        disk_budget_bytes=disk_bytes,
        **kwargs,
    )
    engine = make_engine(
        runner, host_cache_bytes=host_bytes, host_disk_bytes=disk_bytes, max_queue=32
    )
    return runner, engine


def test_beyond_host_memory_conversations_spill_to_disk_and_restore_from_there():
    # Memory holds about one conversation, the disk many.
    runner, engine = disk_engine(host_bytes=9_000, disk_bytes=1_000_000)
    a, a1 = talk(engine, "a1", [], "tell me about the sea, please")
    talk(engine, "b1", [], "what is the time in Paris now?")  # a saved to memory
    talk(engine, "c1", [], "how do I bake bread at home?")  # b saved; a moves to disk
    assert [s.entry for s in runner.spills] == [runner.saves[0].entry]
    assert runner.saved_bytes <= 9_000
    assert len(runner.disk) == 1
    _, a2 = talk(engine, "a2", a, "and the mountains?")
    assert runner.restores[-1].entry == runner.saves[0].entry  # read back from disk
    assert a2.cached_tokens == a1.prompt_tokens + a1.completion_tokens
    status = engine.status()
    assert status["host_cache_disk_entries"] == len(runner.disk) >= 1
    assert status["host_cache_disk_bytes"] == runner.disk_bytes > 0


def test_the_disk_tier_drops_its_least_recently_used_entries_within_its_budget():
    runner, engine = disk_engine(host_bytes=9_000, disk_bytes=9_000)
    histories = {}
    for i, text in enumerate(["the sea, please", "Paris right now", "baking bread", "cakes"]):
        histories[i], _ = talk(engine, f"q{i}", [], f"tell me about {text}")
    # Four conversations, one sequence, room for one in memory and one on disk: the oldest
    # went to disk first, then was dropped for the next; the fake checked both budgets.
    assert len(runner.saved) == 1
    assert len(runner.disk) == 1
    restores = len(runner.restores)
    _, again = talk(engine, "q0b", histories[0], "more?")
    assert len(runner.restores) == restores  # the oldest is gone: recomputed, correctly
    assert again.finish_reason == "stop"


def test_a_disk_entry_whose_file_is_gone_is_recomputed():
    _, engine = disk_engine(host_bytes=9_000, disk_bytes=1_000_000, lose_disk_entries=True)
    a, a1 = talk(engine, "a1", [], "tell me about the sea, please")
    talk(engine, "b1", [], "what is the time in Paris now?")
    talk(engine, "c1", [], "how do I bake bread at home?")  # a "spilled", but the file is lost
    _, a2 = talk(engine, "a2", a, "and the mountains?")
    assert engine.stats.restore_failures == 1
    assert a2.finish_reason == "stop"
    assert a2.cached_tokens < a1.prompt_tokens  # recomputed (the template's opening is kept)


def test_kept_conversations_go_to_disk_at_shutdown_and_come_back_warm_after_a_restart():
    runner, engine = disk_engine(host_bytes=1_000_000, disk_bytes=1_000_000, n_seq_max=2)
    a, a1 = talk(engine, "a1", [], "tell me about the sea, please", tenant="acme")
    b, b1 = talk(engine, "b1", [], "what is the time in Paris now?", tenant="globex")
    talk(engine, "c1", [], "how do I bake bread at home?", tenant="acme")  # a to memory
    assert engine.persist() == 3  # a from memory, b and c from their sequences
    assert not runner.saved
    assert len(runner.disk) == 3

    # A new worker on the same files: fresh sequences, the files found and adopted.
    restarted = FakeRunner(n_seq_max=2, reply_for=lambda p: f"answer to {p}")
    restarted.left_on_disk = {f"file{e}": found for e, found in runner.disk.items()}
    engine2 = make_engine(
        restarted, host_cache_bytes=1_000_000, host_disk_bytes=1_000_000, max_queue=32
    )
    assert engine2.status()["host_cache_disk_entries"] == 3
    _, a2 = talk(engine2, "a2", a, "and the mountains?", tenant="acme")
    _, b2 = talk(engine2, "b2", b, "and in Rome?", tenant="globex")
    assert a2.cached_tokens == a1.prompt_tokens + a1.completion_tokens
    assert b2.cached_tokens == b1.prompt_tokens + b1.completion_tokens
    assert engine2.stats.restored_tokens == a2.cached_tokens + b2.cached_tokens
    # Still per tenant: globex's history is not offered to acme.
    _, x = talk(engine2, "x", b, "and in Rome?", tenant="acme")
    assert x.cached_tokens < b1.prompt_tokens


def test_files_beyond_the_disk_budget_are_not_adopted_at_start():
    tokens = [TRUSTED + i for i in range(100)]
    runner = FakeRunner(n_seq_max=1)
    runner.left_on_disk = {"old": ("t", tokens), "new": ("t", [*tokens, 5])}
    engine = make_engine(runner, host_cache_bytes=1_000_000, host_disk_bytes=150 * 100)
    # Room for one of them (100 tokens of 100 bytes): the first adopted, the other deleted.
    assert engine.status()["host_cache_disk_entries"] == 1
    assert list(runner.disk.values()) == [("t", tokens)]
    assert not runner.left_on_disk  # both were answered: bound or deleted


def test_a_turns_short_message_is_computed_in_one_step_beside_running_streams():
    runner, engine, params = sixteen_streams(300, 40)
    assert engine.scheduler.prompt_budget < 30  # a long prompt would go in chunks this size
    engine.add_request("q1", [ChatMessage("user", "x" * 40)], params)
    engine.add_request("q2", [ChatMessage("user", "z" * 40)], params)
    q1, q2 = engine.scheduler.get("q1"), engine.scheduler.get("q2")
    assert q1 is not None
    assert q2 is not None
    engine.step()
    engine.step()
    # One short prompt a step goes whole (beyond the budget); the other in the next step.
    assert [b.prefills for b in runner.batches[-2:]] == [
        [("q1", len(q1.prompt_tokens) - q1.num_cached)],
        [("q2", len(q2.prompt_tokens) - q2.num_cached)],
    ]
    assert len(q1.prompt_tokens) - q1.num_cached > engine.scheduler.prompt_budget
    streams = {f"s{i}" for i in range(16)}
    assert all(streams <= set(b.decodes) for b in runner.batches[-2:])  # the streams went on


# --- a stream of KV cells per sequence ----------------------------------------------------------


def running(s: Scheduler, rid: str) -> Request:
    request = s.get(rid)
    assert request is not None
    return request


def decoding_runs(engine: Engine) -> int:
    """How many passes llama.cpp makes for the running streams: runs of consecutive ids."""
    ids = sorted(r.seq_id for r in engine.scheduler.running if r.seq_id is not None)
    return sum(1 for i, seq in enumerate(ids) if i == 0 or seq != ids[i - 1] + 1)


def test_with_a_stream_per_sequence_requests_take_the_lowest_free_sequences():
    runner = FakeRunner(n_seq_max=6, kv_unified=False, reply_for=lambda p: "a reply " * 6)
    engine = make_engine(runner, max_queue=32)
    for i in range(3):
        engine.add_request(f"r{i}", [ChatMessage("user", f"q{i}")], SamplingParams(), tenant="t")
    engine.step()
    assert sorted(r.seq_id or 0 for r in engine.scheduler.running) == [0, 1, 2]


def test_gaps_below_running_streams_are_closed_by_moving_the_highest_one_down():
    runner = FakeRunner(n_seq_max=6, kv_unified=False, reply_for=lambda p: p * 4)
    engine = make_engine(runner, max_queue=32, host_cache_bytes=1_000_000, park_idle_steps=1)
    texts = {"a": "tell me a story", "b": "hi", "c": "tell me a much longer story"}
    for rid, text in texts.items():
        engine.add_request(rid, [ChatMessage("user", text)], SamplingParams(), tenant="t")
    replies = dict.fromkeys(texts, "")
    runs, where = [], []
    while engine.has_work:
        for e in engine.step():
            if isinstance(e, Delta):
                replies[e.request_id] += e.text
        runs.append(decoding_runs(engine))
        c = engine.scheduler.get("c")
        where.append(c.seq_id if c is not None else None)
    # "b" (sequence 1) ends first; once its conversation is parked, "c" moves down from 2 to 1,
    # and each reply is whole (the fake checks every token lands after its own history).
    assert where[0] == 2
    assert 1 in where
    assert runs.count(2) <= 2  # the step "b" ended in, and the one that parked it
    assert replies == {rid: text * 4 for rid, text in texts.items()}


def test_a_follow_up_whose_conversation_sits_higher_is_copied_into_the_lowest_sequence():
    runner = FakeRunner(n_seq_max=4, kv_unified=False, reply_for=lambda p: f"answer to {p}")
    engine = make_engine(runner, host_cache_bytes=1_000_000, max_queue=32, park_idle_steps=50)
    # Bob's reply keeps sequence 0 busy while Alice starts in sequence 1.
    engine.add_request("b1", [ChatMessage("user", "x" * 60)], SamplingParams(), tenant="t")
    engine.step()
    asks = [ChatMessage("user", "tell me about the sea, please")]
    engine.add_request("a1", asks, SamplingParams(temperature=0), tenant="t")
    events = engine.step()
    alice = engine.scheduler.get("a1")
    assert alice is not None
    assert alice.seq_id == 1
    reply, first = "", None
    while engine.has_work:
        for e in events + engine.step():
            if isinstance(e, Delta) and e.request_id == "a1":
                reply += e.text
            elif isinstance(e, Done) and e.request_id == "a1":
                first = e
        events = []
    assert first is not None
    _, second = talk(engine, "a2", [*asks, ChatMessage("assistant", reply)], "and the mountains?")
    # Her history came from sequence 1 as a copy into sequence 0: reused, not recomputed.
    copies = [op for ops in runner.kv_log for op in ops if isinstance(op, KvOp) and op.copy_len]
    # (Alice's first turn copied the chat template's opening from Bob's sequence.)
    assert [(op.seq_id, op.copy_from) for op in copies] == [(1, 0), (0, 1)]
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens
    assert not runner.restores


def test_a_gap_holding_a_finished_conversation_is_closed_once_host_memory_has_it():
    s = sched(n_seq_max=4, shared_pool=False, host_cache_tokens=1_000)
    for rid in ("a", "b"):
        s.add(req(rid, prompt=[100 + i for i in range(40)], max_tokens=20))
    step(s)
    a, b = running(s, "a"), running(s, "b")
    assert [a.seq_id, b.seq_id] == [0, 1]
    s.finish(a, FinishReason.STOP)  # kept in sequence 0
    kept, held = list(s.slots[0].tokens), len(b.kv_tokens())
    out = step(s)
    assert b.seq_id == 0
    save = next(op for op in out.kv_ops if isinstance(op, SaveKv))
    assert out.kv_ops == [save, KvOp(0, 0, 1, held), KvOp(1, 0)]
    assert (save.seq_id, save.n_tokens) == (0, len(kept))  # a's conversation saved first


def test_without_host_memory_a_kept_conversation_is_not_moved_out_of_a_gap():
    s = sched(n_seq_max=4, shared_pool=False)
    for rid in ("a", "b"):
        s.add(req(rid, max_tokens=20))
    step(s)
    a, b = running(s, "a"), running(s, "b")
    s.finish(a, FinishReason.STOP)
    step(s)
    assert b.seq_id == 1  # the extra pass is cheaper than recomputing a's history later
    assert s.slots[0].tokens


def test_a_running_reply_whose_kv_could_not_be_moved_ends_and_the_others_go_on():
    runner = FakeRunner(n_seq_max=4, kv_unified=False, reply_for=lambda p: p * 4)
    engine = make_engine(runner, max_queue=32, host_cache_bytes=1_000_000, park_idle_steps=1)
    for rid, text in {"short": "hi", "long": "tell me a much longer story"}.items():
        engine.add_request(rid, [ChatMessage("user", text)], SamplingParams(), tenant="t")
    events: list[Any] = []
    while engine.has_work:
        runner.fail_copies = any(isinstance(e, Done) for e in events)  # once "short" ended
        events += engine.step()
    failed = [e for e in events if isinstance(e, Failed)]
    assert [(e.request_id, e.code) for e in failed] == [("long", "internal")]
    assert "could not be moved" in failed[0].message
    assert [e.request_id for e in events if isinstance(e, Done)] == ["short"]
    assert engine.stats.restore_failures == 0  # not recomputed as if it had not started
    assert not engine.scheduler.running


def test_a_prompt_whose_prefix_copy_failed_is_computed_instead():
    runner = FakeRunner(n_seq_max=4, kv_unified=False, reply_for=lambda p: f"answer to {p}")
    engine = make_engine(runner, max_queue=32)
    system = ChatMessage("system", "You are the assistant of the Acme company. " * 2)
    engine.add_request("a", [system, ChatMessage("user", "x" * 80)], SamplingParams(), tenant="t")
    engine.step()  # "a" holds the system prompt in sequence 0
    runner.fail_copies = True
    _, done = talk(engine, "b", [system], "hello")
    assert done.cached_tokens == 0
    assert engine.stats.restore_failures == 1


def test_a_prefix_copied_from_a_restore_that_failed_in_the_same_step_is_computed_instead():
    runner, engine = conversation_engine(host_bytes=1_000_000, n_seq_max=3)
    system = ChatMessage("system", "You are the assistant of the Acme company. " * 2)
    history, _ = talk(engine, "a1", [system], "tell me about the sea, please")
    talk(engine, "b1", [], "what is the time in Paris now?")
    talk(engine, "c1", [], "how do I bake bread at home?")
    talk(engine, "d1", [], "and how do I make butter?")  # a's sequence saved, then taken
    assert runner.saves
    runner.fail_restores = True
    # In one step: a's follow-up restores her conversation, and e's new one copies the system
    # prompt from the sequence being restored. The restore fails, so the copy has nothing.
    engine.add_request(
        "a2", [*history, ChatMessage("user", "and the mountains?")], SamplingParams(), tenant="t"
    )
    engine.add_request("e1", [system, ChatMessage("user", "hello")], SamplingParams(), tenant="t")
    events = engine.step()
    assert not any(isinstance(e, Failed) for e in events)
    assert engine.stats.restore_failures == 2
    runner.fail_restores = False
    done = {}
    while engine.has_work:
        done.update({e.request_id: e for e in engine.step() if isinstance(e, Done)})
    assert {r: d.finish_reason for r, d in done.items()} == {"a2": "stop", "e1": "stop"}
