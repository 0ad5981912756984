"""The scheduler alone: batches built by hand, runner outputs made up (as vLLM's tests do)."""

import pytest

from inference.scheduler import KvOp, Scheduler, WaitingQueue
from inference.types import FinishReason, Request, RequestStatus, SamplingParams


def req(rid, prompt_len=4, *, max_tokens=8, priority=0, prompt=None):
    tokens = prompt if prompt is not None else [100 + i for i in range(prompt_len)]
    return Request(rid, list(tokens), SamplingParams(max_tokens=max_tokens), priority=priority)


def sched(**kwargs):
    defaults = {"n_seq_max": 2, "kv_capacity": 1000, "max_batch_tokens": 16, "max_queue": 4}
    return Scheduler(**{**defaults, **kwargs})


def status(request):  # read afresh: mypy would keep the status narrowed by an earlier assert
    return request.status


def run_step(s, next_token=7):
    out = s.schedule()
    sampled = {r.request_id: next_token for r in out.sampling_requests()}
    s.update(out, sampled)
    return out


def test_a_request_joins_at_the_next_step_and_prefills_its_prompt():
    s = sched()
    a = req("a", 4)
    s.add(a)
    out = run_step(s)
    assert [c.request.request_id for c in out.prefills] == ["a"]
    assert a.status is RequestStatus.RUNNING
    assert a.output_tokens == [7]


def test_decode_tokens_come_first_then_prompt_chunks_within_the_budget():
    s = sched(max_batch_tokens=8)
    a = req("a", 3)
    s.add(a)
    run_step(s)
    s.add(req("b", 20))
    out = run_step(s)
    assert [d.request.request_id for d in out.decodes] == ["a"]
    assert [(c.request.request_id, len(c.tokens)) for c in out.prefills] == [("b", 7)]
    assert out.num_tokens == 8


def test_a_long_prompt_is_chunked_so_running_streams_keep_decoding():
    s = sched(max_batch_tokens=8)
    a = req("a", 2, max_tokens=100)
    s.add(a)
    run_step(s)
    long = req("long", 40)
    s.add(long)
    steps_with_a_decoding = 0
    while not long.prefill_done:
        out = run_step(s)
        assert out.num_tokens <= 8
        steps_with_a_decoding += any(d.request is a for d in out.decodes)
    assert steps_with_a_decoding >= 5  # a got a token at every step of the long prefill
    assert long.output_tokens == [7]


def test_the_waiting_queue_is_bounded():
    s = sched(n_seq_max=1, max_queue=2)
    assert s.add(req("a"))
    assert s.add(req("b"))
    assert not s.add(req("c"))


def test_the_priority_policy_admits_higher_priority_first_then_arrival_order():
    q = WaitingQueue(10, policy="priority")
    for rid, prio in [("low1", 0), ("high", 5), ("low2", 0)]:
        q.add(req(rid, priority=prio))
    assert [r.request_id for r in q] == ["high", "low1", "low2"]


def test_fcfs_policy_ignores_priority():
    q = WaitingQueue(10, policy="fcfs")
    for rid, prio in [("first", 0), ("second", 9)]:
        q.add(req(rid, priority=prio))
    assert [r.request_id for r in q] == ["first", "second"]


def test_a_finished_request_frees_its_sequence_for_the_next_one_at_once():
    s = sched(n_seq_max=1)
    a, b = req("a"), req("b")
    s.add(a)
    s.add(b)
    run_step(s)
    assert b.status is RequestStatus.WAITING
    s.finish(a, FinishReason.STOP)
    out = run_step(s)
    assert status(b) is RequestStatus.RUNNING
    assert b.seq_id == a.seq_id == 0
    assert [c.request.request_id for c in out.prefills] == ["b"]


def test_a_new_request_reuses_the_kept_prefix_of_a_finished_one():
    s = sched(n_seq_max=1)
    first = req("first", prompt=[1, 2, 3, 4])
    s.add(first)
    run_step(s)  # samples 7
    run_step(s)  # decodes 7, samples 7
    s.finish(first, FinishReason.STOP)
    follow_up = req("follow", prompt=[1, 2, 3, 4, 7, 9, 9])
    s.add(follow_up)
    out = run_step(s)
    assert out.kv_ops == [KvOp(0, keep=5)]
    assert follow_up.num_cached == 5
    assert [(c.start, c.tokens) for c in out.prefills] == [(5, [9, 9])]


def test_an_unrelated_request_starts_from_an_empty_sequence():
    s = sched(n_seq_max=1)
    a = req("a", prompt=[1, 2, 3])
    s.add(a)
    run_step(s)
    s.finish(a, FinishReason.STOP)
    b = req("b", prompt=[5, 6])
    s.add(b)
    out = run_step(s)
    assert out.kv_ops == [KvOp(0, keep=0)]
    assert out.prefills[0].start == 0
    assert out.prefills[0].tokens == [5, 6]


def test_the_last_prompt_token_is_always_recomputed_to_get_logits():
    s = sched(n_seq_max=1)
    a = req("a", prompt=[1, 2, 3])
    s.add(a)
    run_step(s)
    run_step(s)
    s.finish(a, FinishReason.STOP)
    same = req("same", prompt=[1, 2, 3])
    s.add(same)
    out = run_step(s)
    assert out.prefills[0].start == 2
    assert out.prefills[0].tokens == [3]


def test_a_shared_prefix_is_copied_from_another_sequence():
    s = sched(n_seq_max=2)
    system = [50, 51, 52, 53, 54, 55]
    a = req("a", prompt=[*system, 1])
    s.add(a)
    run_step(s)
    b = req("b", prompt=[*system, 2])
    s.add(b)
    out = run_step(s)
    assert KvOp(b.seq_id, 0, copy_from=a.seq_id, copy_len=6) in out.kv_ops
    assert b.num_cached == 6


def test_requests_wait_while_their_kv_reservation_does_not_fit():
    s = sched(n_seq_max=2, kv_capacity=30)
    a = req("a", 10, max_tokens=10)  # reserves 20
    b = req("b", 10, max_tokens=10)
    s.add(a)
    s.add(b)
    run_step(s)
    assert a.status is RequestStatus.RUNNING
    assert b.status is RequestStatus.WAITING
    s.finish(a, FinishReason.STOP)
    run_step(s)  # a's kept cache is evicted to make room
    assert status(b) is RequestStatus.RUNNING


def test_idle_caches_are_evicted_least_recently_used_first():
    s = sched(n_seq_max=3, kv_capacity=40)
    old = req("old", prompt=[1] * 10, max_tokens=1)
    new = req("new", prompt=[2] * 10, max_tokens=1)
    for r in (old, new):
        s.add(r)
        run_step(s)
        s.finish(r, FinishReason.STOP)
    big = req("big", prompt=[3] * 15, max_tokens=10)  # needs 25: one cache must go
    s.add(big)
    out = run_step(s)
    cleared = [op.seq_id for op in out.kv_ops if op.keep == 0]
    assert old.seq_id in cleared
    assert s.slots[new.seq_id].tokens  # the recent cache is kept


def test_cancelling_a_waiting_request_removes_it_from_the_queue():
    s = sched(n_seq_max=1)
    a, b = req("a"), req("b")
    s.add(a)
    s.add(b)
    run_step(s)
    s.finish(b, FinishReason.CANCELLED)
    assert b.status is RequestStatus.FINISHED_CANCELLED
    assert len(s.waiting) == 0
    assert s.get("b") is None


def test_an_errored_sequence_is_cleared_rather_than_reused():
    s = sched(n_seq_max=1)
    a = req("a", prompt=[1, 2, 3])
    s.add(a)
    run_step(s)
    s.finish(a, FinishReason.ERROR)
    assert s.slots[0].tokens == []
    out = s.schedule()
    assert KvOp(0, keep=0) in out.kv_ops


def test_duplicate_request_ids_are_refused():
    s = sched()
    s.add(req("a"))
    with pytest.raises(ValueError, match="duplicate"):
        s.add(req("a"))


def test_background_work_waits_until_half_the_sequences_are_free():
    s = sched(n_seq_max=4)
    for rid in ("a", "b"):
        s.add(req(rid))
    title = req("title", priority=-1)
    title.background = True
    s.add(title)
    run_step(s)
    assert status(title) is RequestStatus.WAITING  # 2 of 4 running: not quiet enough
    s.finish(s.get("a"), FinishReason.STOP)
    run_step(s)
    assert status(title) is RequestStatus.RUNNING


def test_a_reply_arriving_later_still_goes_before_waiting_background_work():
    s = sched(n_seq_max=2)
    s.add(req("a"))
    title = req("title", priority=-1)
    title.background = True
    s.add(title)
    run_step(s)
    s.add(req("b"))
    run_step(s)
    assert [r.request_id for r in s.running] == ["a", "b"]
    assert status(title) is RequestStatus.WAITING


def test_only_a_few_background_requests_run_at_once():
    s = sched(n_seq_max=16, max_batch_tokens=64)
    for i in range(5):
        title = req(f"t{i}", priority=-1)
        title.background = True
        s.add(title)
    run_step(s)
    assert sum(r.background for r in s.running) == 2  # 16 // 8


def test_reply_prompts_are_prefilled_before_background_prompts():
    s = sched(n_seq_max=16, max_batch_tokens=20)
    title = req("title", 30, priority=-1)
    title.background = True
    s.add(title)
    run_step(s)  # alone, the title starts prefilling
    s.add(req("reply", 10))
    out = run_step(s)
    assert next(c.request.request_id for c in out.prefills) == "reply"


def test_a_short_shared_prefix_does_not_take_over_a_kept_conversation():
    s = sched(n_seq_max=2)
    kept = req("kept", prompt=[1, 2, 3, 4, 5, 6, 7, 8])
    s.add(kept)
    run_step(s)
    s.finish(kept, FinishReason.STOP)
    other = req("other", prompt=[1, 2, 9, 9])
    s.add(other)
    out = run_step(s)
    assert other.seq_id != kept.seq_id
    assert KvOp(other.seq_id, 0, copy_from=kept.seq_id, copy_len=2) in out.kv_ops
    assert s.slots[kept.seq_id].tokens == [1, 2, 3, 4, 5, 6, 7, 8]  # still there to reuse


def test_background_prompts_go_in_chunks_of_the_background_budget():
    s = sched(n_seq_max=16, max_batch_tokens=64)
    s.background_prompt_budget = 8
    title = req("title", 30, priority=-1)
    title.background = True
    s.add(title)
    chunks = [sum(len(c.tokens) for c in run_step(s).prefills) for _ in range(4)]
    assert chunks == [8, 8, 8, 6]  # the whole prompt, never more than 8 tokens a step
    assert title.output_tokens == [7]


def test_a_reply_prompt_step_carries_no_background_prompt_chunk():
    s = sched(n_seq_max=16, max_batch_tokens=64)
    title = req("title", 40, priority=-1)
    title.background = True
    s.add(title)
    s.background_prompt_budget = 8
    run_step(s)  # the title starts its prompt
    s.add(req("reply", 10))
    out = run_step(s)
    assert [c.request.request_id for c in out.prefills] == ["reply"]
    out = run_step(s)  # the reply decodes; the title's prompt goes on beside it
    assert [c.request.request_id for c in out.prefills] == ["title"]
    assert title.num_computed == 16


def test_a_new_conversation_copies_a_shared_system_prompt_and_leaves_the_kept_one_whole():
    # The tenant's long system prompt is most of what a first turn holds: even so, another
    # conversation does not take that sequence over while an empty one is free.
    system = list(range(1000, 1030))
    s = sched(n_seq_max=3, max_batch_tokens=64)
    first = req("first", prompt=[*system, 1, 2])
    s.add(first)
    run_step(s)
    s.finish(first, FinishReason.STOP)
    kept = list(s.slots[first.seq_id].tokens)
    other = req("other", prompt=[*system, 3, 4])
    s.add(other)
    out = run_step(s)
    assert other.seq_id != first.seq_id
    assert KvOp(other.seq_id, 0, copy_from=first.seq_id, copy_len=30) in out.kv_ops
    assert other.num_cached == 30
    assert s.slots[first.seq_id].tokens == kept  # whole, for its own next turn
    follow = req("first2", prompt=[*kept, 5, 6])
    s.add(follow)
    run_step(s)
    assert follow.seq_id == first.seq_id
    assert follow.num_cached == len(kept)


def test_a_long_prompt_waits_while_another_is_computed_and_a_short_one_passes_it():
    s = sched(n_seq_max=4, max_batch_tokens=16)
    first = req("first", 100, max_tokens=4)
    s.add(first)
    run_step(s)  # 16 of its 100 tokens computed: 84 left, more than a step's budget
    second = req("second", 100, max_tokens=4, prompt=[500 + i for i in range(100)])
    short = req("short", 10, max_tokens=4, prompt=[900 + i for i in range(10)])
    s.add(second)
    s.add(short)
    out = run_step(s)
    # The second long prompt stays in the queue (its conversation out of the KV pool); the
    # short one behind it is admitted and computed at once.
    assert [r.request_id for r in out.admitted] == ["short"]
    assert status(second) is RequestStatus.WAITING
    assert short.prefill_done
    while len(first.prompt_tokens) - first.num_computed >= 16:
        assert status(second) is RequestStatus.WAITING
        run_step(s)
    run_step(s)  # less than a step's worth left: the next long prompt is admitted
    assert status(second) is RequestStatus.RUNNING


def test_long_prompts_are_admitted_together_when_the_backlog_allows():
    s = sched(n_seq_max=4, max_batch_tokens=16, max_prefill_backlog=1000)
    for rid in ("a", "b", "c"):
        s.add(req(rid, 100, prompt=[ord(rid) * 1000 + i for i in range(100)]))
    out = run_step(s)
    assert [r.request_id for r in out.admitted] == ["a", "b", "c"]


def test_a_follow_up_whose_history_is_kept_counts_only_its_new_tokens():
    s = sched(n_seq_max=4, max_batch_tokens=16)
    turn1 = req("t1", 80, max_tokens=2)
    s.add(turn1)
    while not turn1.output_tokens:
        run_step(s)
    s.finish(turn1, FinishReason.STOP)  # its KV stays kept in its sequence
    s.add(req("long", 100, prompt=[500 + i for i in range(100)]))
    run_step(s)  # a long prompt is being computed
    history = turn1.prompt_tokens + turn1.output_tokens
    follow_up = req("t2", prompt=[*history, 4, 5, 6])
    s.add(follow_up)
    # The kept conversation holds the rest (but the last reply token, never decoded).
    assert s.uncached_estimate(follow_up) == 4
    out = run_step(s)
    assert follow_up in out.admitted  # short: it does not wait for the long prompt
