"""The worker loop and the in-process client, with the fake runner behind them."""

import asyncio
from collections.abc import Sequence

import pytest

from inference.local import LocalEngineClient, LocalTransport
from inference.types import ChatMessage, Delta, Done, Failed, Queued, SamplingParams
from inference.worker import EngineWorker, Submission
from tests.fakes import FakeRunner, make_engine


def sub(rid, text="hi", **params):
    return Submission(rid, (ChatMessage("user", text),), SamplingParams(temperature=0, **params))


class Collect:
    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append(event)


def test_one_iteration_admits_steps_and_publishes():
    transport = LocalTransport()
    worker = EngineWorker(make_engine(), transport, idle_wait=0)
    seen = Collect()
    transport.submit(sub("a"), seen)
    worker.run_once()
    assert worker.engine.num_running == 1
    while worker.engine.has_work:
        worker.run_once()
    assert "".join(e.text for e in seen.events if isinstance(e, Delta)) == "echo: hi"
    assert isinstance(seen.events[-1], Done)


def test_a_cancel_before_the_request_is_taken_never_reaches_the_engine():
    transport = LocalTransport()
    worker = EngineWorker(make_engine(), transport, idle_wait=0)
    seen = Collect()
    transport.submit(sub("a"), seen)
    transport.cancel("a")
    worker.run_once()
    assert not worker.engine.has_work
    assert [(type(e), e.finish_reason) for e in seen.events] == [(Done, "cancelled")]


def test_a_cancel_of_a_running_request_frees_it_on_the_next_iteration():
    runner = FakeRunner(reply_for=lambda _: "y" * 100)
    transport = LocalTransport()
    worker = EngineWorker(make_engine(runner), transport, idle_wait=0)
    seen = Collect()
    transport.submit(sub("a"), seen)
    worker.run_once()
    worker.run_once()
    transport.cancel("a")
    worker.run_once()
    assert not worker.engine.has_work
    assert seen.events[-1].finish_reason == "cancelled"
    assert runner.released == ["a"]


def test_draining_lets_running_replies_finish_and_fails_the_queued():
    transport = LocalTransport()
    worker = EngineWorker(make_engine(FakeRunner(n_seq_max=1)), transport, idle_wait=0)
    first, second = Collect(), Collect()
    transport.submit(sub("a"), first)
    transport.submit(sub("b"), second)
    worker.run_once()
    worker.drain(timeout=5)
    assert first.events[-1].finish_reason == "stop"
    assert isinstance(second.events[-1], Failed)
    assert second.events[-1].code == "shutting_down"


def test_the_heartbeat_reports_load_and_overhead():
    transport = LocalTransport()
    worker = EngineWorker(make_engine(), transport, idle_wait=0)
    worker.maybe_heartbeat(force=True)
    assert transport.last_status["running"] == 0
    assert transport.last_status["slots"] == 4
    assert "overhead_share" in transport.last_status


@pytest.fixture
def client():
    clients = []

    def make(runner=None, **kwargs):
        c = LocalEngineClient(lambda: make_engine(runner or FakeRunner(), **kwargs))
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.stop()


async def collect(client, submission):
    return [event async for event in client.generate(submission)]


async def test_the_local_client_streams_a_reply(client):
    events = await collect(client(), sub("a", "bonjour"))
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "echo: bonjour"
    assert isinstance(events[-1], Done)


async def test_many_concurrent_clients_are_batched_together(client):
    runner = FakeRunner(n_seq_max=4)
    c = client(runner)
    results = await asyncio.gather(*(collect(c, sub(f"r{i}", f"q{i}")) for i in range(8)))
    for i, events in enumerate(results):
        assert "".join(e.text for e in events if isinstance(e, Delta)) == f"echo: q{i}"
    assert max(len(b.decodes) for b in runner.batches) > 1


async def test_queued_requests_hear_their_position(client):
    c = client(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=lambda _: "z" * 20))
    results = await asyncio.gather(*(collect(c, sub(f"r{i}")) for i in range(3)))
    assert any(isinstance(e, Queued) for events in results for e in events)


async def test_closing_the_stream_early_cancels_the_request(client):
    runner = FakeRunner(step_delay=0.005, reply_for=lambda _: "w" * 500)
    c = client(runner)
    stream = c.generate(sub("a"))
    async for event in stream:
        if isinstance(event, Delta):
            break
    await stream.aclose()
    for _ in range(100):
        if "a" in runner.released:
            break
        await asyncio.sleep(0.01)
    assert runner.released == ["a"]
    assert not c.worker.engine.has_work


async def test_an_engine_that_cannot_load_fails_requests_with_worker_down():
    def broken():
        raise FileNotFoundError("model file models/x.gguf is missing")

    c = LocalEngineClient(broken)
    [event] = await collect(c, sub("a"))
    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert "missing" in event.message
    health = await c.health()
    assert health["ok"] is False


async def test_a_busy_engine_answers_at_once(client):
    c = client(FakeRunner(n_seq_max=1, step_delay=0.02, reply_for=lambda _: "v" * 50), max_queue=1)
    results = await asyncio.gather(*(collect(c, sub(f"r{i}")) for i in range(4)))
    codes = [events[-1].code for events in results if isinstance(events[-1], Failed)]
    assert "busy" in codes


class SharedQueue(LocalTransport):
    shared_queue = True  # like Redis: the worker takes only what it can start


def test_parked_background_work_does_not_stop_the_worker_taking_replies():
    transport = SharedQueue()
    worker = EngineWorker(make_engine(FakeRunner(n_seq_max=2)), transport, idle_wait=0)
    transport.submit(sub("a", "first"), Collect())
    worker.run_once()
    background = Submission("title", (ChatMessage("user", "name it"),), background=True)
    transport.submit(background, Collect())
    worker.run_once()  # taken, but parked: half the sequences are busy
    assert worker.engine.num_waiting == 1
    transport.submit(sub("b", "second"), Collect())
    worker.run_once()
    assert {r.request_id for r in worker.engine.scheduler.running} == {"a", "b"}


def test_a_worker_computing_long_prompts_leaves_the_rest_of_the_shared_queue_to_others():
    transport = SharedQueue()
    engine = make_engine(FakeRunner(n_seq_max=8), max_batch_tokens=32)
    worker = EngineWorker(engine, transport, idle_wait=0)
    for i in range(4):
        transport.submit(sub(f"long{i}", "passage " * 60), Collect())
    worker.run_once()
    # It took one, and stopped: its prompt is more than a step's worth to compute.
    assert (engine.num_running, engine.num_waiting, transport.pending_count()) == (1, 0, 3)
    assert engine.scheduler.prefill_full
    # While that one is computed, one more may wait here to start next; the rest stay in the
    # shared queue for a worker with room.
    worker.run_once()
    assert (engine.num_running, engine.num_waiting, transport.pending_count()) == (1, 1, 2)
    worker.run_once()
    assert (engine.num_running, engine.num_waiting, transport.pending_count()) == (1, 1, 2)


def test_a_worker_tells_the_shared_queue_how_many_requests_it_holds():
    class Recording(SharedQueue):
        def __init__(self) -> None:
            super().__init__()
            self.loads: list[int] = []

        def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Submission]:
            self.loads.append(load)
            return super().fetch(limit, timeout, load)

    transport = Recording()
    worker = EngineWorker(make_engine(FakeRunner(n_seq_max=4)), transport, idle_wait=0)
    transport.submit(sub("a", "first"), Collect())
    transport.submit(sub("b", "second"), Collect())
    worker.run_once()
    # One at a time from a shared queue, each fetch saying what the worker held before it.
    assert transport.loads[:3] == [0, 1, 2]
