"""Web client and worker talking through a real Redis, the fake runner behind the worker."""

import asyncio
import json
import threading
import time
import uuid

import pytest
import redis

from inference.transport import RedisEngineClient, RedisWorkerTransport
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from inference.worker import EngineWorker, Submission
from tests import needs
from tests.fakes import FakeRunner, make_engine

pytestmark = pytest.mark.redis

REDIS_URL = needs.TEST_REDIS_URL


@pytest.fixture
def prefix():
    needs.redis_url()  # skips (fails in CI) when no Redis answers there
    name = f"qtest-{uuid.uuid4().hex[:8]}"
    yield name
    r = redis.Redis.from_url(REDIS_URL)
    keys = list(r.scan_iter(f"{name}:*"))
    if keys:
        r.delete(*keys)


class WorkerThread:
    """An inference worker on a thread. It beats every 0.2 s, well inside the tightest
    heartbeat timeout a test gives its client (0.5 s): a beat every second against a 1 s
    timeout reads, now and then, as a dead worker between two beats."""

    def __init__(self, prefix, runner=None, **engine_kwargs):
        self.transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
        self.worker = EngineWorker(
            make_engine(runner or FakeRunner(), **engine_kwargs),
            self.transport,
            idle_wait=0.05,
            heartbeat_interval=0.2,
        )
        self.thread = threading.Thread(target=self.worker.run_forever, daemon=True)

    def __enter__(self):
        self.worker.maybe_heartbeat(force=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.worker.stop_event.set()
        self.thread.join(5)
        self.transport.retire()
        self.transport.close()


def sub(rid=None, text="hi"):
    return Submission(
        rid or uuid.uuid4().hex, (ChatMessage("user", text),), SamplingParams(temperature=0)
    )


def client(prefix, **kwargs):
    return RedisEngineClient(REDIS_URL, prefix=prefix, poll_seconds=0.2, **kwargs)


async def collect(c, s):
    return [e async for e in c.generate(s)]


async def test_a_request_goes_through_redis_to_the_worker_and_streams_back(prefix):
    with WorkerThread(prefix):
        events = await collect(client(prefix), sub(text="你好"))
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "echo: 你好"
    assert isinstance(events[-1], Done)
    assert events[-1].finish_reason == "stop"


async def test_concurrent_requests_share_the_worker(prefix):
    runner = FakeRunner(n_seq_max=4)
    c = client(prefix)
    with WorkerThread(prefix, runner):
        results = await asyncio.gather(*(collect(c, sub(text=f"q{i}")) for i in range(6)))
    for i, events in enumerate(results):
        assert "".join(e.text for e in events if isinstance(e, Delta)) == f"echo: q{i}"
    assert max(len(b.decodes) for b in runner.batches) > 1


async def test_without_a_live_worker_a_request_fails_at_once(prefix):
    started = time.monotonic()
    [event] = await collect(client(prefix), sub())
    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert time.monotonic() - started < 1


async def test_a_full_queue_answers_busy(prefix):
    # A worker that beats but takes nothing: requests pile up in the shared queue.
    transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    transport.heartbeat({})
    c = client(prefix, max_queue=1)
    assert not c.at_capacity()
    waiting = asyncio.ensure_future(collect(c, sub("first")))
    await asyncio.sleep(0.2)
    assert c.at_capacity()  # what admission asks, before anything is stored
    events = await collect(c, sub("second"))
    assert events[-1].code == "busy"
    assert events[-1].retry_after > 0
    await c.cancel("first")
    first = await asyncio.wait_for(waiting, 5)
    assert first[-1].finish_reason == "cancelled"
    transport.close()


async def test_a_worker_that_dies_mid_reply_fails_the_request_instead_of_hanging(prefix):
    runner = FakeRunner(step_delay=0.05, reply_for=lambda _: "s" * 1000)
    c = client(prefix, heartbeat_timeout=0.5)
    worker = WorkerThread(prefix, runner)
    worker.__enter__()
    events = []
    async for event in c.generate(sub()):
        events.append(event)
        if isinstance(event, Delta) and worker.thread.is_alive():
            worker.worker.stop_event.set()  # the worker stops heartbeating and stepping
            worker.thread.join(5)
    worker.transport.close()
    assert isinstance(events[-1], Failed)
    assert events[-1].code == "worker_down"


async def test_cancelling_a_running_request_reaches_the_worker(prefix):
    runner = FakeRunner(step_delay=0.01, reply_for=lambda _: "c" * 500)
    c = client(prefix)
    with WorkerThread(prefix, runner):
        s = sub("victim")
        stream = c.generate(s)
        async for event in stream:
            if isinstance(event, Delta):
                break
        await stream.aclose()  # what a client disconnect does
        for _ in range(100):
            if "victim" in runner.released:
                break
            await asyncio.sleep(0.02)
    assert runner.released == ["victim"]


async def test_health_lists_live_workers_and_their_load(prefix):
    c = client(prefix)
    assert (await c.health())["ok"] is False
    with WorkerThread(prefix):
        health = await c.health()
    assert health["ok"] is True
    assert health["workers"][0]["slots"] == 4


async def test_a_request_still_waiting_after_a_poll_hears_its_queue_position(prefix):
    transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    transport.heartbeat({})  # alive, but taking nothing
    c = client(prefix)
    heard = []

    async def listen(rid):
        async for event in c.generate(sub(rid)):
            heard.append((rid, event))

    tasks = [asyncio.ensure_future(listen("one")), asyncio.ensure_future(listen("two"))]
    await asyncio.sleep(0.7)
    positions = {rid: e.position for rid, e in heard if e.type == "queued"}
    assert positions == {"one": 1, "two": 2}
    await c.cancel("one")
    await c.cancel("two")
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    transport.close()


NOW = time.time()


def tenant_sub(rid, tenant, *, priority=0, at=0.0):
    return Submission(
        rid,
        (ChatMessage("user", rid),),
        SamplingParams(temperature=0),
        priority=priority,
        tenant=tenant,
        submitted_at=NOW + at,
    )


async def enqueue_all(c, subs):
    """Put submissions in the shared queue without waiting for their events."""
    from inference.transport import _ENQUEUE, queue_meta

    for s in subs:
        await c.redis.eval(
            _ENQUEUE,
            4,
            c.keys.queue,
            c.keys.body(s.request_id),
            c.keys.meta,
            c.keys.bell,
            100,
            int(s.submitted_at * 1000),
            s.request_id,
            json.dumps(s.to_dict()),
            60,
            queue_meta(s),
        )


async def test_several_workers_take_the_shared_queue_in_one_fair_order(prefix):
    c = client(prefix)
    subs = [tenant_sub(f"a{i}", "a", at=i * 0.001) for i in range(8)]
    subs += [tenant_sub(f"b{i}", "b", at=1 + i * 0.001) for i in range(3)]
    await enqueue_all(c, subs)
    first = RedisWorkerTransport(REDIS_URL, prefix=prefix, aging=10**9)
    second = RedisWorkerTransport(REDIS_URL, prefix=prefix, aging=10**9)
    taken: list[str] = []
    try:
        while len(taken) < len(subs):
            for worker in (first, second):  # two workers, one request each at a time
                taken.extend(s.request_id for s in worker.fetch(1, 0))
    finally:
        first.close()
        second.close()
    # B arrived after all of A's eight, yet its three interleave with A's backlog.
    assert taken[:6] == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert sorted(taken) == sorted(s.request_id for s in subs)  # each taken exactly once


async def test_a_higher_priority_tenant_gets_a_larger_share_of_the_shared_queue(prefix):
    c = client(prefix)
    subs = [tenant_sub(f"lo{i}", "lo", priority=0, at=i * 0.001) for i in range(6)]
    subs += [tenant_sub(f"hi{i}", "hi", priority=1, at=i * 0.001) for i in range(6)]
    await enqueue_all(c, subs)
    worker = RedisWorkerTransport(REDIS_URL, prefix=prefix, aging=10**9)
    try:
        taken = [s.request_id for s in worker.fetch(6, 0)]
    finally:
        worker.close()
    assert sum(r.startswith("hi") for r in taken) == 4


async def test_a_request_queued_past_the_wait_bound_is_answered_busy(prefix):
    # A worker is alive but never takes anything (its heartbeat only).
    transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    transport.heartbeat({})
    try:
        s = Submission(
            uuid.uuid4().hex,
            (ChatMessage("user", "hi"),),
            SamplingParams(temperature=0),
            submitted_at=time.time() - 5,
        )
        events = await asyncio.wait_for(collect(client(prefix, max_wait=1.0), s), 10)
    finally:
        transport.retire()
        transport.close()
    assert isinstance(events[-1], Failed)
    assert events[-1].code == "busy"
    assert events[-1].retry_after
    r = redis.Redis.from_url(REDIS_URL)
    assert r.zcard(f"{prefix}:queue") == 0


async def test_a_queued_client_hears_the_wait_its_workers_predict(prefix):
    # A worker taking nothing, whose sequences free in 3 and 5 s and then hold a reply 10 s.
    transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    # A snapshot time ahead of this clock (another machine's) ages nothing: exact figures.
    ahead = time.time() + 60
    transport.heartbeat({"queue_slots": [[3.0, 10.0], [5.0, 10.0]], "status_time": ahead})
    c = client(prefix)
    heard = []

    async def listen(rid):
        async for event in c.generate(sub(rid)):
            heard.append((rid, event))

    tasks = [asyncio.ensure_future(listen(rid)) for rid in ("one", "two", "three")]
    try:
        await asyncio.sleep(0.7)
        told = {rid: (e.position, e.estimated_wait) for rid, e in heard if e.type == "queued"}
        assert told == {"one": (1, 3.0), "two": (2, 5.0), "three": (3, 13.0)}
        # A snapshot two seconds old: its sequences free two seconds sooner from now.
        transport.heartbeat({"queue_slots": [[3.0, 10.0]], "status_time": time.time() - 2})
        estimate = await c._estimate(0, await c.live_workers())
        assert estimate is not None
        assert estimate <= 1.0
    finally:
        for rid in ("one", "two", "three"):
            await c.cancel(rid)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        transport.close()


async def test_a_queued_client_waits_for_the_prompts_ahead_of_it_too(prefix):
    # Issue #35 §4: sequences free now, but the worker's prompts end in 4 s and each reply
    # computes 800 prompt tokens at 5 ms: the first in the shared queue is told 4 + 4 = 8 s,
    # the second 12 s, not "now" (what the sequences alone said).
    transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    ahead = time.time() + 60  # ages nothing: exact figures
    transport.heartbeat(
        {
            "queue_slots": [[0.0, 10.0], [0.0, 10.0], [0.0, 10.0]],
            "prompt_queue": [4.0, 0.005, 800.0],
            "status_time": ahead,
        }
    )
    c = client(prefix)
    live = await c.live_workers()
    assert [await c._estimate(rank, live) for rank in range(3)] == [8.0, 12.0, 16.0]
    # A worker of an older version, with no prompt queue: the sequences alone, as before.
    transport.heartbeat({"queue_slots": [[0.0, 10.0]], "status_time": ahead})
    assert await c._estimate(0, live) == 0.0
    transport.close()


async def test_a_worker_tells_the_shared_queue_its_wait_and_the_client_passes_it_on(prefix):
    runner = FakeRunner(n_seq_max=1, step_delay=0.005, reply_for=lambda p: "z" * 2000)
    runner.step_seconds = lambda decode, prefill: 0.05
    c = client(prefix)
    with WorkerThread(prefix, runner) as w:
        w.worker.heartbeat_interval = 0.2
        first = c.generate(sub("first"))
        async for event in first:
            if isinstance(event, Delta):
                break
        second = c.generate(sub("second"))
        estimate = None
        async for event in second:  # its stream: queue places until the worker says a wait
            assert event.type == "queued"
            estimate = event.estimated_wait
            if estimate is not None:
                break
        await second.aclose()
        await first.aclose()
    # The running reply's remaining tokens at 0.05 s a step, as the worker's step line says.
    assert estimate is not None
    assert 0 < estimate <= 2000 * 0.05


async def test_a_worker_reads_when_the_shared_queues_oldest_reply_was_asked(prefix):
    c = client(prefix)
    title = Submission(
        "title",
        (ChatMessage("user", "name it"),),
        SamplingParams(temperature=0),
        background=True,
        submitted_at=NOW - 9,
    )
    await enqueue_all(c, [title, tenant_sub("newer", "a", at=-1), tenant_sub("older", "b", at=-3)])
    worker = RedisWorkerTransport(REDIS_URL, prefix=prefix)
    try:
        # Background work waited longest, but nobody waits on it: the oldest *reply* counts.
        assert worker.oldest_waiting() == NOW - 3
        worker.fetch(3, 0)
        assert worker.oldest_waiting() is None
    finally:
        worker.close()


def turn_sub(rid, conversation, *, at):
    return Submission(
        rid,
        (ChatMessage("user", rid),),
        SamplingParams(temperature=0),
        tenant="t",
        submitted_at=at,
        conversation=conversation,
    )


async def test_a_conversations_turn_waits_briefly_for_the_worker_holding_its_history(prefix):
    c = client(prefix)
    holder = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="holder", affinity=60)
    other = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="other", affinity=60)
    try:
        for worker in (holder, other):
            worker.heartbeat({})
        now = time.time()
        await enqueue_all(c, [turn_sub("turn1", "conv-a", at=now)])
        assert [s.request_id for s in holder.fetch(1, 0)] == ["turn1"]  # it runs turn 1
        # Turn 2 of that conversation, and a new conversation's first turn behind it.
        await enqueue_all(c, [turn_sub("turn2", "conv-a", at=now), turn_sub("new", "b", at=now)])
        assert [s.request_id for s in other.fetch(2, 0)] == ["new"]  # turn 2 is left alone
        assert [s.request_id for s in holder.fetch(2, 0)] == ["turn2"]
    finally:
        holder.close()
        other.close()


async def test_past_the_affinity_window_or_without_a_live_holder_any_worker_takes_the_turn(
    prefix,
):
    c = client(prefix)
    holder = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="holder", affinity=5)
    other = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="other", affinity=5)
    try:
        holder.heartbeat({})
        other.heartbeat({})
        now = time.time()
        await enqueue_all(c, [turn_sub("t1", "conv-a", at=now), turn_sub("u1", "conv-b", at=now)])
        assert {s.request_id for s in holder.fetch(2, 0)} == {"t1", "u1"}
        # conv-a's next turn has waited past the window: the free worker computes it.
        await enqueue_all(c, [turn_sub("t2", "conv-a", at=now - 6)])
        assert [s.request_id for s in other.fetch(1, 0)] == ["t2"]
        # The holder went away (its heartbeat gone): conv-b's next turn does not wait for it.
        holder.retire()
        await enqueue_all(c, [turn_sub("u2", "conv-b", at=time.time())])
        assert [s.request_id for s in other.fetch(1, 0)] == ["u2"]
    finally:
        holder.close()
        other.close()


async def test_with_affinity_off_any_worker_takes_a_conversations_turn(prefix):
    c = client(prefix)
    holder = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="holder", affinity=0)
    other = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="other", affinity=0)
    try:
        holder.heartbeat({})
        other.heartbeat({})
        await enqueue_all(c, [turn_sub("t1", "conv-a", at=time.time())])
        assert [s.request_id for s in holder.fetch(1, 0)] == ["t1"]
        await enqueue_all(c, [turn_sub("t2", "conv-a", at=time.time())])
        assert [s.request_id for s in other.fetch(1, 0)] == ["t2"]
    finally:
        holder.close()
        other.close()


async def test_a_busier_worker_leaves_a_new_request_to_a_lighter_one_for_a_moment(prefix):
    c = client(prefix)
    busy = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="busy", balance=5)
    idle = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="idle", balance=5)
    try:
        for worker in (busy, idle):
            worker.heartbeat({})
        assert idle.fetch(1, 0, load=0) == []  # the idle worker polls: its load is known
        now = time.time()
        await enqueue_all(c, [turn_sub("fresh", "conv-a", at=now)])
        # The busy worker (16 requests) passes it over while the idle one has room ...
        assert busy.fetch(1, 0, load=16) == []
        assert [s.request_id for s in idle.fetch(1, 0, load=0)] == ["fresh"]
        # ... and takes one that has waited past the balance window.
        await enqueue_all(c, [turn_sub("old", "conv-b", at=now - 6)])
        assert [s.request_id for s in busy.fetch(1, 0, load=16)] == ["old"]
        # Equally loaded workers do not wait for each other.
        assert idle.fetch(1, 0, load=1) == []  # the queue is empty; it records its load, 1
        await enqueue_all(c, [turn_sub("even", "conv-c", at=time.time())])
        assert [s.request_id for s in busy.fetch(1, 0, load=1)] == ["even"]
    finally:
        busy.close()
        idle.close()


async def test_balance_never_keeps_a_conversation_from_the_worker_holding_it(prefix):
    c = client(prefix)
    holder = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="holder", balance=5)
    other = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="other", balance=5)
    try:
        for worker in (holder, other):
            worker.heartbeat({})
        await enqueue_all(c, [turn_sub("t1", "conv-a", at=time.time())])
        assert [s.request_id for s in holder.fetch(1, 0, load=0)] == ["t1"]
        assert other.fetch(1, 0, load=0) == []
        # The holder is busier, but the turn's history is in its KV: it takes it at once.
        await enqueue_all(c, [turn_sub("t2", "conv-a", at=time.time())])
        assert [s.request_id for s in holder.fetch(1, 0, load=8)] == ["t2"]
    finally:
        holder.close()
        other.close()


async def test_a_dead_workers_last_load_does_not_hold_requests_back(prefix):
    c = client(prefix)
    busy = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="busy", balance=5)
    gone = RedisWorkerTransport(REDIS_URL, prefix=prefix, worker_id="gone", balance=5)
    try:
        busy.heartbeat({})
        gone.heartbeat({})
        assert gone.fetch(1, 0, load=0) == []
        gone.retire()
        await enqueue_all(c, [turn_sub("r", "conv-a", at=time.time())])
        assert [s.request_id for s in busy.fetch(1, 0, load=16)] == ["r"]
    finally:
        busy.close()
        gone.close()
