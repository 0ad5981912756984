"""A reply's grammar that makes every step slower (issue #32: a 248-byte request with
`^(a{0,256}){0,256}$` held every tenant's replies for 24 minutes; /healthz said "ok", a
disconnect did not free it, SIGTERM did not stop the process). Four layers, each tested here
without the model: the schema refused up front (test_constraints.py holds those cases), a time
budget per step that ends the request alone, a watchdog that reports a stuck step, and a
SIGTERM that ends a process whose step never returns."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from inference.local import LocalEngineClient
from inference.metrics import render
from inference.scheduler import SchedulerOutput
from inference.types import ChatMessage, Constraint, Done, Failed, Request, SamplingParams
from inference.worker import EngineWorker, exit_when_stuck
from tests.fakes import FakeRunner, make_engine

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
JSON = Constraint('root ::= "{}"', schema="")


def run(engine: Any, steps: int = 200) -> list[Any]:
    events = []
    for _ in range(steps):
        if not engine.has_work:
            break
        events += engine.step()
    return events


# --- the time budget per step ------------------------------------------------------------


def test_a_grammar_over_its_budget_ends_its_request_alone_and_the_others_go_on() -> None:
    def took(request: Request) -> float:
        # Each token costs more than the one before, as under the pattern.
        return 0.4 * len(request.output_tokens)

    runner = FakeRunner(grammar_step_seconds=1.0, grammar_seconds=took)
    engine = make_engine(runner)
    engine.add_request("hostile", [ChatMessage("user", "x")], SamplingParams(constraint=JSON))
    engine.add_request("free", [ChatMessage("user", "a story")], SamplingParams(max_tokens=40))
    events = run(engine)
    failed = [e for e in events if isinstance(e, Failed)]
    assert [(e.request_id, e.code) for e in failed] == [("hostile", "grammar_too_slow")]
    assert "simplify it" in failed[0].message
    done = [e for e in events if isinstance(e, Done)]
    assert [(e.request_id, e.finish_reason) for e in done] == [("free", "stop")]
    assert "hostile" in runner.released  # its samplers are freed
    assert engine.stats.snapshot()["errors"] == {"grammar_too_slow": 1}


def test_a_grammar_within_its_budget_or_without_one_is_left_alone() -> None:
    for budget in (1.0, 0.0):
        runner = FakeRunner(grammar_step_seconds=budget, grammar_seconds=lambda r: 0.9)
        engine = make_engine(runner)
        engine.add_request("json", [ChatMessage("user", "x")], SamplingParams(constraint=JSON))
        events = run(engine)
        assert [type(e).__name__ for e in events][-1] == "Done"
        assert not any(isinstance(e, Failed) for e in events)


# --- the watchdog -----------------------------------------------------------------------------


class StuckRunner(FakeRunner):
    """A step that never returns on its own: inside a C call (as llama.cpp's grammar was),
    until `release_step` is set."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_step = threading.Event()
        self.release_step = threading.Event()

    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        if not out.is_empty:
            self.in_step.set()
            libc = ctypes.CDLL(None)
            while not self.release_step.is_set():
                libc.usleep(20_000)  # in C, the GIL released, like llama_sampler_apply
        return super().execute(out)


class Beats:
    shared_queue = False

    def __init__(self, subs: Sequence[Any] = ()) -> None:
        self.subs = list(subs)
        self.beats: list[dict[str, Any]] = []

    def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Any]:
        taken, self.subs = self.subs, []
        return taken

    def cancellations(self) -> Sequence[str]:
        return []

    def oldest_waiting(self) -> float | None:
        return None

    def publish(self, events: Sequence[Any]) -> None:
        pass

    def heartbeat(self, stats: dict[str, Any]) -> None:
        self.beats.append(stats)


def stuck_worker(stall_after: float = 0.2) -> tuple[EngineWorker, StuckRunner, threading.Thread]:
    from inference.worker import Submission

    runner = StuckRunner()
    transport = Beats([Submission("r1", (ChatMessage("user", "hi"),))])
    worker = EngineWorker(
        make_engine(runner), transport, heartbeat_interval=0.05, stall_after=stall_after
    )

    def loop() -> None:
        try:
            worker.run_forever()
        finally:
            worker.finished.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert runner.in_step.wait(10)
    return worker, runner, thread


def test_a_step_running_past_the_limit_is_reported_stalled_live_and_in_the_beats() -> None:
    worker, runner, thread = stuck_worker(stall_after=0.2)
    beater = threading.Thread(target=worker.heartbeat_forever, args=(600,), daemon=True)
    beater.start()
    try:
        time.sleep(0.5)
        state = worker.watchdog()
        assert state["stalled"] == 1
        assert state["step_running_seconds"] >= 0.3
        beats: list[dict[str, Any]] = worker.transport.beats  # type: ignore[attr-defined]
        assert any(b["stalled"] == 1 for b in beats)
        text = render({"mode": "redis", "workers": [{"id": "w1", **beats[-1]}]}).decode()
        assert 'qassist_engine_stalled{worker="w1"} 1.0' in text
    finally:
        runner.release_step.set()
        worker.stop_event.set()
        thread.join(10)
    assert worker.watchdog() == {"step_running_seconds": 0.0, "stalled": 0}


def test_healthz_says_503_while_the_embedded_engine_is_stuck_in_a_step(
    settings: Any,
) -> None:
    from django.test import Client

    from inference.service import set_engine_client
    from inference.worker import Submission

    settings.REDIS_URL = ""
    runner = StuckRunner()
    local = LocalEngineClient(lambda: make_engine(runner), stall_after=0.2)
    local.start()
    assert local.wait_ready(10)
    set_engine_client(local)
    try:
        local.transport.submit(Submission("r", (ChatMessage("u", "x"),)), lambda event: None)
        assert runner.in_step.wait(10)
        time.sleep(0.4)
        response = Client().get("/healthz")
        assert response.status_code == 503
        body = response.json()
        assert body["down"] == ["engine"]
        assert "in one step for" in body["engine"]["error"]
        assert body["engine"]["workers"][0]["stalled"] == 1
    finally:
        runner.release_step.set()
        local.stop(5)
        set_engine_client(None)


# --- stopping a process whose step never returns --------------------------------------------


def test_a_stop_exits_a_stuck_worker_after_its_drain_time_and_waits_for_a_live_one() -> None:
    worker, runner, thread = stuck_worker()
    exits: list[int] = []
    worker.stop_event.set()
    started = time.monotonic()
    assert exit_when_stuck(worker, drain_timeout=0.3, exit=exits.append, grace=0.2)
    assert exits == [1]
    assert time.monotonic() - started < 5
    runner.release_step.set()
    thread.join(10)
    # A worker that drains in time is left to finish.
    assert not exit_when_stuck(worker, drain_timeout=0.3, exit=exits.append, grace=0.2)
    assert exits == [1]


def test_the_embedded_engine_stops_the_process_when_its_step_never_returns() -> None:
    runner = StuckRunner()
    local = LocalEngineClient(lambda: make_engine(runner))
    local.start()
    assert local.wait_ready(10)
    from inference.worker import Submission

    local.transport.submit(Submission("r", (ChatMessage("u", "x"),)), lambda event: None)
    assert runner.in_step.wait(10)
    exits: list[int] = []
    try:
        time.sleep(5.2)  # past the grace a stuck step gets (inference.worker.STUCK_AFTER_DRAIN)
        local.stop(0.2, exit=exits.append)
        assert exits == [1]
    finally:
        runner.release_step.set()
        local.stop(5)


CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    sys.path.insert(0, {root!r})
    from inference.types import ChatMessage
    from inference.worker import EngineWorker, Submission, stop_on_signals
    from tests.fakes import make_engine
    from tests.inference.test_hostile_grammar import Beats, StuckRunner

    runner = StuckRunner()
    worker = EngineWorker(make_engine(runner), Beats([Submission("r", (ChatMessage("u", "x"),))]))
    # As run_inference_worker does.
    stop_on_signals(worker, (signal.SIGTERM, signal.SIGINT), drain_timeout={drain})
    threading.Thread(target=lambda: (runner.in_step.wait(), print("stuck", flush=True))).start()
    worker.run_forever()  # on the main thread, stuck in C: no Python signal handler could run
    worker.drain({drain})
    worker.finished.set()
    """
)


def test_sigterm_ends_a_worker_whose_step_is_stuck_in_c_within_its_drain_time() -> None:
    """The main thread sits in a C call that never returns; a Python signal handler would never
    run there. The signal thread drains, then ends the process (exit code 1)."""
    drain = 1.0
    child = subprocess.Popen(  # noqa: S603 - this interpreter, the test's own script
        [sys.executable, "-c", CHILD.format(root=str(ROOT), drain=drain)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "qassist.settings"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"stuck"
        time.sleep(5.5)  # the step has been stuck longer than the grace
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        code = child.wait(30)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert code == 1
    assert drain <= took < drain + 5, took
    assert child.stderr is not None
    assert b"cannot drain" in child.stderr.read()
