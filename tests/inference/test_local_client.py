"""The embedded mode's engine client: a full queue is answered at once, not after a step; an
engine that cannot start is told to every caller at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from inference.engine import Engine
from inference.local import LocalEngineClient
from inference.types import ChatMessage, Done, Failed, SamplingParams
from inference.worker import Submission
from tests.fakes import FakeRunner, make_engine


def sub(text: str) -> Submission:
    return Submission(text, (ChatMessage("user", text),), SamplingParams(temperature=0))


async def last_event(client: LocalEngineClient, text: str) -> object:
    events = [e async for e in client.generate(sub(text))]
    return events[-1]


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine never got there")


async def test_a_full_queue_is_answered_busy_by_the_client_without_reaching_the_engine() -> None:
    # One sequence and a queue of one, with slow steps: the first request runs, the second
    # waits; the third is refused by the client itself, before the engine's next step.
    runner = FakeRunner(n_seq_max=1, step_delay=0.05, reply_for=lambda _: "x" * 40)
    client = LocalEngineClient(lambda: make_engine(runner, max_queue=1))
    client.start()
    assert client.wait_ready(5)
    assert client.worker is not None
    scheduler = client.worker.engine.scheduler
    try:
        first = asyncio.create_task(last_event(client, "go 1"))
        await until(lambda: len(scheduler.running) == 1)
        second = asyncio.create_task(last_event(client, "go 2"))
        await until(lambda: len(scheduler.waiting) == 1)

        third = await last_event(client, "go 3")

        assert isinstance(third, Failed)
        assert third.code == "busy"
        assert third.retry_after is not None
        assert "go 3" not in runner.prompts.values()  # the engine never saw it
        assert isinstance(await first, Done)
        assert isinstance(await second, Done)
    finally:
        client.stop(timeout=5)


def test_when_the_web_process_exits_the_engine_drains_and_keeps_its_conversations(
    monkeypatch,
) -> None:
    at_exit: list[Callable[[], None]] = []
    monkeypatch.setattr("inference.local.atexit.register", at_exit.append)
    runner = FakeRunner(n_seq_max=1, disk_budget_bytes=1_000_000)
    engine = make_engine(runner, host_cache_bytes=1_000_000, host_disk_bytes=1_000_000)
    client = LocalEngineClient(lambda: engine)

    async def chat() -> object:
        return await last_event(client, "tell me about the sea, please")

    assert isinstance(asyncio.run(chat()), Done)
    assert at_exit == [client.stop]  # registered when the engine thread started
    at_exit[0]()  # what the interpreter does at exit
    assert not client.alive
    # The kept conversation was written to the disk tier (the drain's last act).
    assert [tokens for _, tokens in runner.disk.values()] == [runner.kv[0]]


async def test_a_missing_model_file_is_one_clear_line_and_every_request_is_told(caplog) -> None:
    def no_model():
        raise FileNotFoundError("model file /x/m.gguf is missing: run `manage.py fetch_model m`")

    client = LocalEngineClient(no_model)
    with caplog.at_level("ERROR", logger="inference.local"):
        assert client.wait_ready(5)
    [record] = [r for r in caplog.records if "could not start" in r.getMessage()]
    assert "fetch_model" in record.getMessage()
    assert record.exc_info is None  # a configuration error, not a stack trace
    event = await last_event(client, "hello")
    assert isinstance(event, Failed)
    assert event.code == "worker_down"
    assert "fetch_model" in event.message


@pytest.fixture
def thread_exceptions(monkeypatch: pytest.MonkeyPatch) -> list[type[BaseException]]:
    """What escaped a thread (instead of pytest's own warning about it, after the test)."""
    escaped: list[type[BaseException]] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_type))
    return escaped


def refusing_to_start(error: BaseException) -> Callable[[], Engine]:
    def factory() -> Engine:
        raise error

    return factory


@pytest.mark.timeout(30)  # a caller left waiting would wait out the bound, patched to an hour
@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("llama.cpp could not load the model at /x/m.gguf"),
        pytest.skip.Exception("the embedded model is missing at /x/m.gguf"),  # a BaseException
    ],
    ids=["Exception", "BaseException"],
)
async def test_a_factory_that_fails_tells_every_waiting_caller_at_once_with_its_reason(
    error: BaseException,
    thread_exceptions: list[type[BaseException]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("inference.local.LOAD_WAIT_SECONDS", 3600.0)
    client = LocalEngineClient(refusing_to_start(error))

    events = await asyncio.gather(*(last_event(client, f"hello {i}") for i in range(8)))

    for event in events:
        assert isinstance(event, Failed)
        assert event.code == "worker_down"
        assert event.message == f"The model is not running: {error}"
    assert client.wait_ready(0)  # set, not left for the bound to run out
    assert client.load_error == str(error)
    assert (await client.health())["ok"] is False
    assert thread_exceptions == []  # recorded, not left to escape the engine thread


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, SystemExit])
def test_an_interruption_of_the_factory_is_recorded_then_raised_again(
    interruption: type[BaseException], thread_exceptions: list[type[BaseException]]
) -> None:
    client = LocalEngineClient(refusing_to_start(interruption()))
    client.start()
    assert client.wait_ready(10)
    assert client._thread is not None
    client._thread.join(10)

    assert client.load_error == interruption.__name__
    assert not client.alive
    assert thread_exceptions == [interruption]  # still what ends the thread


def test_a_stop_while_the_model_loads_keeps_the_engine_from_starting() -> None:
    # Found with two real engines (issue #36): stop() during the load found no worker to
    # stop; the engine then served on and stop() waited for it forever.
    loading = threading.Event()
    release = threading.Event()

    def slow_factory() -> Engine:
        loading.set()
        release.wait(5)
        return make_engine(FakeRunner())

    client = LocalEngineClient(slow_factory)
    client.start()
    assert loading.wait(5)
    stopper = threading.Thread(target=client.stop, kwargs={"timeout": 5, "exit": print})
    stopper.start()
    release.set()
    stopper.join(10)

    assert not stopper.is_alive()
    assert client.worker is not None
    assert client.worker.finished.is_set()  # the engine loop ran no further
    assert not client.alive
