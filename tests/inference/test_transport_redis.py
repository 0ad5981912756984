"""Web client and worker talking through a real Redis, the fake runner behind the worker."""

import asyncio
import json
import os
import threading
import time
import uuid

import pytest
import redis

from inference.transport import RedisEngineClient, RedisWorkerTransport
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from inference.worker import EngineWorker, Submission
from tests.fakes import FakeRunner, make_engine

pytestmark = pytest.mark.redis

REDIS_URL = os.environ.get("QASSIST_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
def prefix():
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        if os.environ.get("QASSIST_REQUIRE_SERVICES"):
            raise
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    name = f"qtest-{uuid.uuid4().hex[:8]}"
    yield name
    r = redis.Redis.from_url(REDIS_URL)
    keys = list(r.scan_iter(f"{name}:*"))
    if keys:
        r.delete(*keys)


class WorkerThread:
    def __init__(self, prefix, runner=None, **engine_kwargs):
        self.transport = RedisWorkerTransport(REDIS_URL, prefix=prefix)
        self.worker = EngineWorker(
            make_engine(runner or FakeRunner(), **engine_kwargs), self.transport, idle_wait=0.05
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
