"""The inference worker loop: take requests, step the engine, publish events, keep a heartbeat.

The loop is a handful of small methods that tests call one at a time with a fake runner and an
in-memory transport. The same loop runs in `manage.py run_inference_worker` (Redis transport) and
on a thread of the web process in the embedded mode (in-process transport).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from inference.budget import Turn
from inference.engine import Engine
from inference.types import ChatMessage, ErrorCode, Event, SamplingParams

logger = logging.getLogger(__name__)

MAX_RECONNECT_WAIT = 2.0  # seconds between attempts while the transport is unreachable
MAX_CREDITED_WAIT = 600.0  # seconds
# After a stop was asked and the drain time is up: a step still running this long is stuck in
# llama.cpp (which no Python code can interrupt), and the process ends without it.
STUCK_AFTER_DRAIN = 5.0


@dataclass(frozen=True)
class Submission:
    """A request as it travels from the web process to a worker."""

    request_id: str
    messages: tuple[ChatMessage, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    priority: int = 0
    submitted_at: float = field(default_factory=time.time)
    background: bool = False  # work nobody waits on (titles): runs only on spare sequences
    tenant: str = ""  # the tenant's slug: fair shares between tenants, KV reuse kept within one
    conversation: str = ""  # the chat session id, when the request continues a conversation
    # The model that is to answer (a worker takes only its own model's requests); "" is the
    # deployment's default (QASSIST_MODEL), which the web side names before it queues.
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
            "params": self.params.to_dict(),
            "priority": self.priority,
            "background": self.background,
            "submitted_at": self.submitted_at,
            "tenant": self.tenant,
            "conversation": self.conversation,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Submission:
        return cls(
            request_id=str(data["request_id"]),
            messages=tuple(
                ChatMessage(str(m["role"]), str(m["content"])) for m in data["messages"]
            ),
            params=SamplingParams.from_dict(data.get("params") or {}),
            priority=int(data.get("priority", 0)),
            background=bool(data.get("background", False)),
            submitted_at=float(data.get("submitted_at", time.time())),
            tenant=str(data.get("tenant", "")),
            conversation=str(data.get("conversation", "")),
            model=str(data.get("model", "")),
        )


def _credited_wait(submitted_at: float) -> float:
    """Seconds a request spent in a queue before the engine (the shared queue), counted towards
    the wait bound, TTFT and the floor's yield. Clocks of two machines may differ: never more
    than a queue could plausibly have held it."""
    return min(max(0.0, time.time() - submitted_at), MAX_CREDITED_WAIT)


class TransportUnavailable(Exception):
    """The transport cannot reach the web processes now (Redis restarting): events cannot be
    delivered. The worker ends what it runs and tries again; the transport reconnects."""


class WorkerTransport(Protocol):
    # True when requests wait in a queue shared by several workers: take only what can start.
    shared_queue: bool

    # `load`: the requests this worker holds now, so a shared queue can favour a lighter one.
    def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Submission]: ...
    def cancellations(self) -> Sequence[str]: ...
    def publish(self, events: Sequence[Event]) -> None: ...
    def heartbeat(self, stats: dict[str, Any]) -> None: ...
    # When (time.time()) the oldest reply not yet fetched was asked; None when none waits.
    def oldest_waiting(self) -> float | None: ...


class EngineWorker:
    def __init__(
        self,
        engine: Engine,
        transport: WorkerTransport,
        *,
        heartbeat_interval: float = 1.0,
        idle_wait: float = 0.5,
        stall_after: float = 30.0,
        turn: Turn | None = None,
    ) -> None:
        self.engine = engine
        # The host's compute turn (inference.budget), held for each step; None: steps run
        # whenever they are due (one engine on the host).
        self.turn = turn
        self.transport = transport
        self.heartbeat_interval = heartbeat_interval
        self.idle_wait = idle_wait
        # The watchdog: a step running this long (0: never) reports the engine stalled.
        self.stall_after = stall_after
        self.step_started: float | None = None  # monotonic, while a step runs
        self._stall_logged = False
        self.draining = False
        self.stop_event = threading.Event()
        self.finished = threading.Event()  # set by whoever ran the loop, once it ended
        self._last_heartbeat = 0.0
        self.started_at = time.time()
        self.last_progress = time.monotonic()  # when the loop last began an iteration
        self._snapshot: dict[str, Any] = self.status()  # the latest, for the beat thread

    def run_once(self) -> None:
        self.last_progress = time.monotonic()
        self.apply_cancellations()
        if not self.draining:
            self.admit()
        if not self.engine.has_work and not self.draining:
            self.engine.idle()  # passages' KV is computed when nothing else is to do
        if self.engine.has_work:
            self.transport.publish(self._step())
        self.maybe_heartbeat()

    def _step(self) -> list[Event]:
        # The wait for the host's turn counts as the step's for the watchdog: an engine held
        # up by its neighbour's stuck step is stuck too, and its replies wait as long.
        self.step_started = time.monotonic()
        try:
            if self.turn is None:
                return self.engine.step()
            with self.turn:
                return self.engine.step()
        finally:
            self.step_started = None

    def watchdog(self, now: float | None = None) -> dict[str, Any]:
        """How long the step running now has run (0 between steps) and whether that is past
        `stall_after`: read from any thread, for /healthz and /metrics (issue #32: a step held
        by one request's grammar for 24 minutes while /healthz said "ok")."""
        started = self.step_started
        now = time.monotonic() if now is None else now
        running = 0.0 if started is None else max(0.0, now - started)
        stalled = self.stall_after > 0 and running >= self.stall_after
        if stalled and not self._stall_logged:
            logger.error(
                "the engine has been in one step for %.0f s: stalled (every reply waits)", running
            )
        self._stall_logged = stalled
        return {"step_running_seconds": round(running, 1), "stalled": int(stalled)}

    def apply_cancellations(self) -> None:
        for request_id in self.transport.cancellations():
            self.transport.publish(self.engine.abort(request_id))

    def admit(self) -> None:
        scheduler = self.engine.scheduler
        if self.transport.shared_queue:
            # Take what can start now; background work parked here must not hold replies back.
            waiting = sum(not r.background for r in scheduler.waiting)
            limit = scheduler.free_slots - waiting
            if scheduler.prefill_full:
                # A long prompt taken now would wait here for the prompts being computed: one
                # may (it starts the moment there is room), the rest stay in the shared queue
                # for a worker that has room now.
                limit = min(limit, 1 - waiting)
        else:
            limit = scheduler.free_slots + scheduler.waiting.max_size - self.engine.num_waiting + 1
        if limit > 0:
            self._take(limit)
        # The replies still in the shared queue count for the speed floor's yield too: with
        # every sequence at the floor's limit, that is where they wait.
        oldest = self.transport.oldest_waiting()
        self.engine.waits.note_waiting_elsewhere(
            None if oldest is None else time.monotonic() - _credited_wait(oldest)
        )

    def _take(self, limit: int) -> None:
        timeout = 0.0 if self.engine.has_work else self.idle_wait
        shared = self.transport.shared_queue
        scheduler = self.engine.scheduler
        while limit > 0:
            # From a shared queue one at a time: once the prompts this worker has to compute
            # fill its prefill backlog, what it took would wait here while another worker may
            # have room (the length of a prompt is known only once it is taken).
            load = len(scheduler.running) + sum(not r.background for r in scheduler.waiting)
            taken = self.transport.fetch(1 if shared else limit, timeout, load)
            if not taken:
                return
            timeout = 0.0
            for sub in taken:
                self._add(sub)
            limit -= len(taken)
            if shared and scheduler.pending_prefill() >= scheduler.max_prefill_backlog:
                return

    def _add(self, sub: Submission) -> None:
        waited = _credited_wait(sub.submitted_at)
        events = self.engine.add_request(
            sub.request_id,
            sub.messages,
            sub.params,
            priority=sub.priority,
            background=sub.background,
            tenant=sub.tenant,
            waited=waited,
        )
        self.transport.publish(events)

    def maybe_heartbeat(self, *, force: bool = False) -> None:
        """On the engine's thread: beat with fresh numbers when one is due."""
        now = time.monotonic()
        if force or now - self._last_heartbeat >= self.heartbeat_interval:
            self._last_heartbeat = now
            self._snapshot = self.status()
            self.transport.heartbeat(self._snapshot)

    def status(self) -> dict[str, Any]:
        """The engine's live numbers and counters (see `Engine.status`), sent with every
        heartbeat: `/metrics` and the admin status page read them from there."""
        return {
            **self.engine.status(),
            "status_time": time.time(),  # when they were taken: `queue_slots` count from it
            "slots": self.engine.runner.n_seq_max,
            "draining": self.draining,
            **self.watchdog(),
            **self._turn_status(),
            "started_at": self.started_at,
            "time": time.time(),
        }

    def _turn_status(self) -> dict[str, Any]:
        if self.turn is None:
            return {}
        return {"cpu_turns": self.turn.taken, "cpu_turn_wait_seconds": round(self.turn.waited, 3)}

    def heartbeat_forever(self, stall_seconds: float = 60.0) -> None:
        """Beat from a thread of its own (run_inference_worker starts one), so that one long
        engine step on a busy machine (llama.cpp releases the GIL while it decodes) is not
        taken for a dead worker and its replies cut. A loop stuck for `stall_seconds` stops
        the beats: then it is dead for every purpose, and web processes say so."""
        while not self.stop_event.wait(self.heartbeat_interval):
            if time.monotonic() - self.last_progress > stall_seconds:
                continue
            try:
                # The numbers the engine's thread last took: reading the engine's counters
                # from here, while it steps, could catch a dict changing size. The watchdog's
                # are live.
                beat = {**self._snapshot, "time": time.time(), **self.watchdog()}
                self.transport.heartbeat(beat)
            except TransportUnavailable:
                pass  # the loop notices too, ends what it runs and reconnects
            except Exception:
                logger.exception("heartbeat failed")

    def run_forever(self) -> None:
        outage_since: float | None = None
        retry = 0.1
        while not self.stop_event.is_set():
            try:
                self.run_once()
            except TransportUnavailable as exc:
                if outage_since is None:
                    outage_since = time.monotonic()
                    self._end_undeliverable(exc)
                self.stop_event.wait(retry)
                retry = min(retry * 2, MAX_RECONNECT_WAIT)
                continue
            except Exception:  # one bad iteration must not kill every user's stream
                logger.exception("inference worker iteration failed")
                time.sleep(0.1)
            if outage_since is not None:
                logger.warning(
                    "transport reachable again after %.1f s", time.monotonic() - outage_since
                )
                outage_since, retry = None, 0.1

    def _end_undeliverable(self, exc: TransportUnavailable) -> None:
        """The transport went away: no event of a running request can reach its client, whose
        side has failed it already, nor can its cancel reach us. End them all now rather than
        generate to max_tokens for nobody."""
        ended = self.engine.fail_all(ErrorCode.WORKER_DOWN, "The transport was lost.")
        logger.warning(
            "%s: ended %d request(s) that can no longer be delivered; reconnecting",
            exc,
            len(ended),
        )

    def drain(self, timeout: float) -> int:
        """Stop taking requests, let running ones finish, then end the rest with an error; keep
        the conversations the engine holds on disk for the next run. Returns how many are."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.engine.has_work and time.monotonic() < deadline:
            self.apply_cancellations()
            if self.engine.num_running == 0:
                break  # only queued requests are left: they would never start here
            self.transport.publish(self._step())
            self.maybe_heartbeat()
        self.transport.publish(
            self.engine.fail_all(
                ErrorCode.SHUTTING_DOWN, "The assistant restarted before this reply finished."
            )
        )
        self.maybe_heartbeat(force=True)
        try:
            return self.engine.persist()
        except Exception:  # a cache: the next run recomputes what it cannot find
            logger.exception("saving kept conversations to disk failed")
            return 0


def exit_when_stuck(
    worker: EngineWorker,
    *,
    drain_timeout: float,
    exit: Callable[[int], object] = os._exit,
    grace: float = STUCK_AFTER_DRAIN,
) -> bool:
    """After a stop was asked: give the loop its drain time; if it has not finished by then
    and a step has been running `grace` seconds or more, that step is stuck in llama.cpp and
    never returns. Say so and end the process (`exit(1)`): SIGTERM stops a stuck engine
    within its drain time, not only SIGKILL. Returns whether it did."""
    if worker.finished.wait(drain_timeout):
        return False
    while not worker.finished.wait(0.5):
        running = worker.watchdog()["step_running_seconds"]
        if running >= grace:
            logger.error(
                "stopping: the engine has been in one step for %.0f s and cannot drain; "
                "exiting without it",
                running,
            )
            logging.shutdown()
            exit(1)
            return True
    return False


def stop_on_signals(
    worker: EngineWorker,
    signals: Iterable[signal.Signals],
    *,
    drain_timeout: float,
    exit: Callable[[int], object] = os._exit,
) -> threading.Thread:
    """Stop on `signals` even while the main thread is stuck in a C call. A Python signal
    handler runs on the main thread between two bytecodes, so a step stuck in llama.cpp kept
    SIGTERM from ever being handled (issue #32: only SIGKILL ended the process). The
    interpreter's own C-level handler still runs at once, and writes the signal's number to the
    wakeup file descriptor: a thread of ours reads it there. The first signal starts the drain
    (`stop_event`) and ends a stuck process after its drain time; a second exits at once.
    Call it on the main thread."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for signum in signals:
        # What the main thread runs when it gets to it; the thread below does the rest.
        signal.signal(signum, lambda signum, frame: worker.stop_event.set())
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def wait() -> None:
        first = True
        while True:
            received = os.read(read_end, 1)
            if not received:
                return
            name = signal.Signals(received[0]).name
            if not first:
                logger.warning("signal %s again: exiting now", name)
                exit(1)
                return
            first = False
            logger.info("signal %s: draining", name)
            worker.stop_event.set()
            threading.Thread(
                target=exit_when_stuck,
                args=(worker,),
                kwargs={"drain_timeout": drain_timeout, "exit": exit},
                daemon=True,
            ).start()

    thread = threading.Thread(target=wait, name="signals", daemon=True)
    thread.start()
    return thread
