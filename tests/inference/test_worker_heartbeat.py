"""The worker's heartbeat thread: alive through long engine steps, silent when the loop is
stuck, quiet about a transport that is down."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from inference.types import Event
from inference.worker import EngineWorker, Submission, TransportUnavailable
from tests.fakes import FakeRunner, make_engine


class BeatCounter:
    shared_queue = True

    def __init__(self, *, down: bool = False) -> None:
        self.beats: list[dict[str, Any]] = []
        self.down = down
        self.beaten = threading.Event()

    def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Submission]:
        return []

    def cancellations(self) -> Sequence[str]:
        return []

    def oldest_waiting(self) -> float | None:
        return None

    def publish(self, events: Sequence[Event]) -> None:
        pass

    def heartbeat(self, stats: dict[str, Any]) -> None:
        if self.down:
            self.beaten.set()
            raise TransportUnavailable("Redis unreachable")
        self.beats.append(stats)
        if len(self.beats) >= 3:
            self.beaten.set()


def start(worker: EngineWorker, stall_seconds: float) -> threading.Thread:
    thread = threading.Thread(target=worker.heartbeat_forever, args=(stall_seconds,), daemon=True)
    thread.start()
    return thread


def test_it_beats_while_the_loop_is_busy_in_one_long_step() -> None:
    transport = BeatCounter()
    worker = EngineWorker(make_engine(FakeRunner()), transport, heartbeat_interval=0.01)
    worker.last_progress = time.monotonic()  # the loop began a step and is still in it
    thread = start(worker, stall_seconds=600)
    assert transport.beaten.wait(10)
    worker.stop_event.set()
    thread.join(5)
    assert len(transport.beats) >= 3
    assert transport.beats[0]["slots"] == 4


def test_it_falls_silent_when_the_loop_has_been_stuck_too_long() -> None:
    transport = BeatCounter()
    worker = EngineWorker(make_engine(FakeRunner()), transport, heartbeat_interval=0.01)
    worker.last_progress = time.monotonic() - 120
    thread = start(worker, stall_seconds=60)
    # Give it many intervals to (wrongly) beat; then it must still have said nothing.
    assert not transport.beaten.wait(0.3)
    worker.stop_event.set()
    thread.join(5)
    assert transport.beats == []


def test_a_transport_that_is_down_does_not_end_the_heartbeat_thread() -> None:
    transport = BeatCounter(down=True)
    worker = EngineWorker(make_engine(FakeRunner()), transport, heartbeat_interval=0.01)
    thread = start(worker, stall_seconds=600)
    assert transport.beaten.wait(10)
    assert thread.is_alive()
    transport.down = False
    transport.beaten.clear()
    assert transport.beaten.wait(10)  # beats again once the transport is back
    worker.stop_event.set()
    thread.join(5)
