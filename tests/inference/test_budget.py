"""Two engines on one host take turns for its cores (issue #36, point 4; inference/budget.py):
with the CPU budget no two engines step at the same time, the turn is handed over between
steps, and an idle engine costs the busy one nothing. Engines over fake runners whose steps
take a little time, and real processes for the lock files."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pytest_django import Settings

from inference import service
from inference.budget import FileTurn, HostTurns, TicketLock, Turn
from inference.local import LocalEngineClient
from inference.scheduler import SchedulerOutput
from inference.types import ChatMessage, Done, Event, SamplingParams
from inference.worker import Submission
from tests.fakes import FakeRunner, make_engine

STEP = 0.01  # seconds each fake step "decodes"


@dataclass
class TimedRunner(FakeRunner):
    """A fake runner that records when each of its steps ran (monotonic start, end)."""

    step_times: list[tuple[float, float]] = field(default_factory=list)

    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        started = time.monotonic()
        try:
            return super().execute(out)
        finally:
            self.step_times.append((started, time.monotonic()))


def overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> int:
    """How many of a's steps ran while one of b's did."""
    return sum(1 for s, e in a if any(s < e2 and s2 < e for s2, e2 in b))


def sub(text: str, max_tokens: int = 24) -> Submission:
    return Submission(
        uuid.uuid4().hex,
        (ChatMessage("user", text),),
        SamplingParams(temperature=0, max_tokens=max_tokens),
    )


async def ask(client: LocalEngineClient, text: str) -> list[Event]:
    return [event async for event in client.generate(sub(text))]


Engine = tuple[LocalEngineClient, TimedRunner]


@pytest.fixture
def engines() -> Iterator[Callable[[Turn | None, Turn | None], tuple[Engine, Engine]]]:
    """Two in-process engines (as embedded mode runs two models), each with its seat."""
    made: list[LocalEngineClient] = []

    def one(turn: Turn | None) -> Engine:
        runner = TimedRunner(step_delay=STEP, reply_for=lambda prompt: "a long reply " * 3)
        client = LocalEngineClient(functools.partial(make_engine, runner), turn=turn)
        client.start()
        assert client.wait_ready(5)
        made.append(client)
        return client, runner

    yield lambda first, second: (one(first), one(second))
    for client in made:
        client.stop(timeout=5)


Engines = Callable[[Turn | None, Turn | None], tuple[Engine, Engine]]


async def both_busy(a: LocalEngineClient, b: LocalEngineClient) -> list[list[Event]]:
    return await asyncio.gather(*(ask(c, f"q{i}") for i in range(3) for c in (a, b)))


# --- two engines, both busy -------------------------------------------------------------------


async def test_two_busy_engines_sharing_the_budget_never_step_at_the_same_time(
    engines: Engines,
) -> None:
    turns = HostTurns()
    (a, runner_a), (b, runner_b) = engines(turns.seat(), turns.seat())

    results = await both_busy(a, b)

    assert all(isinstance(events[-1], Done) for events in results)
    assert len(runner_a.step_times) > 10
    assert len(runner_b.step_times) > 10
    assert overlaps(runner_a.step_times, runner_b.step_times) == 0


async def test_without_the_budget_the_same_two_engines_do_step_at_the_same_time(
    engines: Engines,
) -> None:
    (a, runner_a), (b, runner_b) = engines(None, None)

    await both_busy(a, b)

    assert overlaps(runner_a.step_times, runner_b.step_times) > 0  # what the budget prevents


async def test_two_busy_engines_take_turns_step_by_step(engines: Engines) -> None:
    turns = HostTurns()
    (a, runner_a), (b, runner_b) = engines(turns.seat(), turns.seat())

    await both_busy(a, b)

    # While both have work, neither runs two steps in a row: the turn is handed over after
    # each (a step of one may follow its own only when the other had nothing to step).
    steps = sorted(
        [(s, "a") for s, _ in runner_a.step_times] + [(s, "b") for s, _ in runner_b.step_times]
    )
    both_busy_until = min(runner_a.step_times[-1][0], runner_b.step_times[-1][0])
    during = [who for start, who in steps if start < both_busy_until]
    repeats = sum(1 for x, y in itertools.pairwise(during) if x == y)
    assert repeats <= len(during) // 5, during


# --- one idle ---------------------------------------------------------------------------------


async def test_an_idle_engine_never_makes_the_busy_one_wait(engines: Engines) -> None:
    turns = HostTurns()
    seat_a, seat_b = turns.seat(), turns.seat()
    (a, runner_a), (_b, runner_b) = engines(seat_a, seat_b)

    results = await asyncio.gather(*(ask(a, f"q{i}") for i in range(4)))

    assert all(isinstance(events[-1], Done) for events in results)
    assert seat_a.taken == len(runner_a.step_times) > 10
    assert seat_b.taken == 0  # the idle engine never asked for the turn
    assert runner_b.step_times == []
    assert seat_a.waited < 0.05 * STEP * seat_a.taken + 0.05  # no step waited for another


async def test_the_busy_engines_wait_is_the_other_ones_steps_when_both_are_busy(
    engines: Engines,
) -> None:
    turns = HostTurns()
    seat_a, seat_b = turns.seat(), turns.seat()
    (a, _runner_a), (b, runner_b) = engines(seat_a, seat_b)

    await both_busy(a, b)

    # The control of the test above: here engine a did wait, about one of b's steps a turn.
    assert seat_a.waited > 0.3 * STEP * len(runner_b.step_times)


# --- the locks themselves ---------------------------------------------------------------------


def test_the_ticket_lock_hands_the_turn_to_the_one_waiting_before_its_holder_asks_again() -> None:
    lock = TicketLock()
    order: list[str] = []
    lock.acquire()

    def other() -> None:
        lock.acquire()
        order.append("other")
        lock.release()

    thread = threading.Thread(target=other)
    thread.start()
    while lock.waiting == 0:
        time.sleep(0.001)
    lock.release()
    lock.acquire()  # the holder asks again at once: it queues behind the other
    order.append("holder")
    lock.release()
    thread.join(5)

    assert order == ["other", "holder"]


def queue_held(folder: Path) -> bool:
    fd = os.open(folder / "queue.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_file_turn_goes_to_the_seat_waiting_before_its_holder_asks_again(
    tmp_path: Path,
) -> None:
    holder, other = FileTurn(tmp_path), FileTurn(tmp_path)
    order: list[str] = []
    holder.acquire()

    def wait_for_turn() -> None:
        other.acquire()
        order.append("other")
        other.release()

    thread = threading.Thread(target=wait_for_turn)
    thread.start()
    while not queue_held(tmp_path):  # the other seat sits in the queue, waiting for the turn
        time.sleep(0.001)
    holder.release()
    holder.acquire()
    order.append("holder")
    holder.release()
    thread.join(5)
    holder.close()
    other.close()

    assert order == ["other", "holder"]


CHILD = """
import sys, time
from pathlib import Path
from inference.budget import HostTurns
turn = HostTurns(Path(sys.argv[1])).seat()
spans = []
for _ in range(int(sys.argv[2])):
    with turn:
        start = time.monotonic()
        time.sleep(0.005)
        spans.append((start, time.monotonic()))
print(" ".join(f"{s}:{e}" for s, e in spans))
"""


def test_engines_of_two_processes_never_step_at_the_same_time(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    children = [
        subprocess.Popen(  # noqa: S603 (this interpreter, the test's own script)
            [sys.executable, "-c", CHILD, str(tmp_path), "40"],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120)[0] for child in children]
    assert all(child.returncode == 0 for child in children)

    spans = [[tuple(float(x) for x in pair.split(":")) for pair in out.split()] for out in outputs]
    assert len(spans[0]) == len(spans[1]) == 40
    assert overlaps(spans[0], spans[1]) == 0  # type: ignore[arg-type]


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "models", "on"),
    [
        ("auto", [], False),
        ("auto", ["smollm2-135m"], False),  # the default listed again: still one model
        ("auto", ["qwen2.5-coder-1.5b"], True),
        ("off", ["qwen2.5-coder-1.5b"], False),
        ("on", [], True),
    ],
)
def test_the_budget_is_on_by_default_when_more_than_one_model_is_configured(
    settings: Settings, tmp_path: Path, mode: str, models: list[str], on: bool
) -> None:
    settings.QASSIST_MODEL = "smollm2-135m"
    settings.QASSIST_MODELS = models
    settings.QASSIST_CPU_BUDGET = mode
    settings.QASSIST_CPU_BUDGET_DIR = str(tmp_path / "cpu")
    service._host_turns = None
    try:
        turn = service.engine_turn()
        assert (turn is not None) == on
        if turn is not None:
            assert turn.file_turn is not None  # shared with the host's other processes
            assert (tmp_path / "cpu" / "turn.lock").exists()
            turn.close()
    finally:
        service._host_turns = None


def test_an_engine_s_seat_is_taken_while_the_client_is_being_made(
    settings: Settings, tmp_path: Path
) -> None:
    """get_engine_client() holds the service's lock while it makes the client, and making the
    client of two embedded models takes each engine's seat: a seat must not need that lock (it
    deadlocked the web process of a two-model deployment at its first request)."""
    settings.QASSIST_MODEL = "smollm2-135m"
    settings.QASSIST_MODELS = ["qwen2.5-coder-1.5b"]
    settings.QASSIST_CPU_BUDGET = "on"
    settings.QASSIST_CPU_BUDGET_DIR = str(tmp_path / "cpu")
    service._host_turns = None
    seats: list[Turn | None] = []
    try:
        with service._lock:
            taker = threading.Thread(
                target=lambda: seats.append(service.engine_turn()), daemon=True
            )
            taker.start()
            taker.join(timeout=5)
        assert not taker.is_alive(), "engine_turn() waited for the lock get_engine_client holds"
        assert seats
        seat = seats[0]
        assert seat is not None
        seat.close()
    finally:
        taker.join(timeout=5)
        service._host_turns = None
