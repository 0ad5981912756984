"""The embedded mode: the same engine loop on a thread of the web process, no Redis needed.

`LocalTransport` is the worker's side (called on the engine thread); `LocalEngineClient` is the
web side (asyncio). Events cross from the thread to the event loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

from inference.budget import Turn
from inference.engine import Engine
from inference.metrics import record_refusal
from inference.types import Done, ErrorCode, Event, Failed, FinishReason
from inference.worker import EngineWorker, Submission, exit_when_stuck

logger = logging.getLogger(__name__)

Listener = Callable[[Event], None]

# Seconds a request waits for the model to load (a few on a fresh process) before it is
# answered worker_down; a load that fails answers every waiting request at once.
LOAD_WAIT_SECONDS = 120.0


class LocalTransport:
    shared_queue = False

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, Submission] = {}
        self._cancels: list[str] = []
        self._listeners: dict[str, Listener] = {}
        self.last_status: dict[str, Any] = {}
        self.last_beat = 0.0

    # web side
    def submit(self, sub: Submission, listener: Listener) -> None:
        with self._cond:
            self._listeners[sub.request_id] = listener
            self._pending[sub.request_id] = sub
            self._cond.notify()

    def cancel(self, request_id: str) -> None:
        with self._cond:
            if self._pending.pop(request_id, None) is not None:
                self._deliver(Done(request_id, FinishReason.CANCELLED.value, 0, 0))
                return
            self._cancels.append(request_id)
            self._cond.notify()

    def forget(self, request_id: str) -> None:
        self._listeners.pop(request_id, None)

    def pending_count(self) -> int:
        with self._cond:
            return len(self._pending)

    # engine side
    def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Submission]:
        with self._cond:
            if not self._pending and not self._cancels and timeout > 0:
                self._cond.wait(timeout)
            taken: list[Submission] = []
            while self._pending and len(taken) < limit:
                request_id = next(iter(self._pending))
                taken.append(self._pending.pop(request_id))
            return taken

    def oldest_waiting(self) -> float | None:
        with self._cond:
            asked = [s.submitted_at for s in self._pending.values() if not s.background]
            return min(asked) if asked else None

    def cancellations(self) -> Sequence[str]:
        with self._cond:
            ids, self._cancels = self._cancels, []
            return ids

    def publish(self, events: Sequence[Event]) -> None:
        for event in events:
            self._deliver(event)

    def _deliver(self, event: Event) -> None:
        listener = self._listeners.get(event.request_id)
        if listener is not None:
            listener(event)
        if isinstance(event, Done | Failed):
            self._listeners.pop(event.request_id, None)

    def heartbeat(self, stats: dict[str, Any]) -> None:
        self.last_status = stats
        self.last_beat = time.time()


class LocalEngineClient:
    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        *,
        heartbeat_timeout: float = 10.0,
        stall_after: float = 30.0,
        model: str = "",
        turn: Turn | None = None,
    ) -> None:
        self._factory = engine_factory
        # Its seat at the host's compute turn (inference.budget), when engines share the cores.
        self.turn = turn
        # The name it serves; a request naming another is refused. "": the one model of this
        # process, whatever a request names it (as before #36).
        self.model = model
        self.heartbeat_timeout = heartbeat_timeout
        self.stall_after = stall_after
        self.transport = LocalTransport()
        self.worker: EngineWorker | None = None
        self.load_error: str | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._ready = threading.Event()
        self._stop_requested = False

    def start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="qassist-engine", daemon=True
                )
                self._thread.start()
                # When the web process exits (daphne stopped by SIGTERM or Ctrl-C), the engine
                # drains and keeps its conversations on disk like a worker does, instead of
                # vanishing with its daemon thread.
                atexit.register(self.stop)

    def _run(self) -> None:
        try:
            self.worker = EngineWorker(
                self._factory(), self.transport, stall_after=self.stall_after, turn=self.turn
            )
        except BaseException as exc:
            # Whatever ends the factory, a BaseException too (KeyboardInterrupt, SystemExit, a
            # test framework's own outcome exceptions), callers waiting for the engine are told
            # at once instead of waiting out their bound on a thread that is already gone.
            self._failed_to_start(exc)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            return
        if self._stop_requested:
            # stop() came while the model loaded: it found no worker to stop, so this one
            # must not start serving (it would run on with nobody to stop it).
            self.worker.stop_event.set()
        self._ready.set()
        try:
            self.worker.run_forever()
            on_disk = self.worker.drain(timeout=10.0)
        finally:
            self.worker.finished.set()
        if on_disk:
            logger.info("engine stopped; %d conversations saved on disk", on_disk)

    def _failed_to_start(self, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):  # no model file: its message says what to run
            logger.error("the in-process engine could not start: %s", exc)
        else:
            logger.error("the in-process engine could not start", exc_info=exc)
        self.load_error = str(exc) or type(exc).__name__
        self._ready.set()

    def wait_ready(self, timeout: float = LOAD_WAIT_SECONDS) -> bool:
        """Whether the engine is ready or failed to start (load_error) within `timeout`."""
        self.start()
        return self._ready.wait(timeout)

    @property
    def alive(self) -> bool:
        return (
            self._thread is not None
            and self._thread.is_alive()
            and self.worker is not None
            and not self.worker.stop_event.is_set()
        )

    def stop(self, timeout: float = 15.0, *, exit: Callable[[int], object] = os._exit) -> None:
        """Drain the engine, waiting at most `timeout`; a step stuck in llama.cpp past that
        would keep the web process from ever exiting (issue #32: only SIGKILL ended it), so
        then the process ends here (`exit_when_stuck`)."""
        self._stop_requested = True
        if self.worker is not None:
            self.worker.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive() and self.worker is not None:
                exit_when_stuck(self.worker, drain_timeout=0.0, exit=exit)

    async def _until_ready(self) -> None:
        """Wait for the engine to load, or to fail to, on this event loop: an executor thread
        per waiting request would fill the loop's default executor while a model loads. An
        engine thread that is gone is not waited for."""
        deadline = time.monotonic() + LOAD_WAIT_SECONDS
        while not self._ready.is_set() and time.monotonic() < deadline:
            if self._thread is not None and not self._thread.is_alive():
                return
            await asyncio.sleep(0.05)

    async def served_models(self) -> list[str]:
        return [self.model] if self.model and self.load_error is None else []

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        if self.model and sub.model and sub.model != self.model:
            yield Failed(
                sub.request_id,
                ErrorCode.WORKER_DOWN.value,
                f"No engine serves the model '{sub.model}' in this process.",
            )
            return
        self.start()
        await self._until_ready()
        if not self.alive:
            if self.load_error:
                reason = f": {self.load_error}"
            elif not self._ready.is_set():
                reason = f": it did not finish loading in {LOAD_WAIT_SECONDS:g} s"
            else:
                reason = ""
            yield Failed(
                sub.request_id, ErrorCode.WORKER_DOWN.value, f"The model is not running{reason}"
            )
            return
        if self._queue_full():
            # Told now, not after the engine's current step (seconds, on a busy machine).
            record_refusal(reason="busy", tenant=sub.tenant)
            yield Failed(
                sub.request_id,
                ErrorCode.BUSY.value,
                "The assistant is at capacity; try again shortly.",
                retry_after=self._engine_retry_after(),
            )
            return
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Event] = asyncio.Queue()

        def listener(event: Event) -> None:
            loop.call_soon_threadsafe(inbox.put_nowait, event)

        self.transport.submit(sub, listener)
        finished = False
        try:
            while True:
                try:
                    event = await asyncio.wait_for(inbox.get(), timeout=1.0)
                except TimeoutError:
                    if not self.alive:
                        yield Failed(
                            sub.request_id,
                            ErrorCode.WORKER_DOWN.value,
                            "The model stopped while generating this reply.",
                        )
                        finished = True
                        return
                    continue
                finished = isinstance(event, Done | Failed)
                yield event
                if finished:
                    return
        finally:
            if not finished:
                self.transport.cancel(sub.request_id)
            self.transport.forget(sub.request_id)

    def at_capacity(self, model: str = "") -> bool:
        """The queue is full now (admission asks, before anything is stored)."""
        return self.alive and self._queue_full()

    def _queue_full(self) -> bool:
        """No sequence free and the queue full, counting what the engine has not fetched yet.
        Read from this thread while the engine steps: lengths only, and the engine still
        refuses exactly what it cannot queue."""
        worker = self.worker
        if worker is None:
            return False
        scheduler = worker.engine.scheduler
        waiting = len(scheduler.waiting) + self.transport.pending_count()
        return scheduler.free_slots <= 0 and waiting >= scheduler.waiting.max_size

    def _engine_retry_after(self) -> float:
        worker = self.worker
        return worker.engine.retry_after() if worker is not None else 5.0

    async def cancel(self, request_id: str) -> None:
        self.transport.cancel(request_id)

    async def health(self) -> dict[str, Any]:
        models = [self.model] if self.model else []
        if self.load_error:
            return {"mode": "embedded", "ok": False, "error": self.load_error, "models": models}
        if not self._ready.is_set():
            return {"mode": "embedded", "ok": False, "state": "loading", "models": models}
        workers = [self.transport.last_status] if self.transport.last_status else []
        if self.worker is not None:
            # The watchdog's numbers live: the status is beaten between steps only.
            workers = [{**(workers[0] if workers else {}), **self.worker.watchdog()}]
        workers = [{**w, "model": self.model} for w in workers]
        return {"mode": "embedded", "ok": self.alive, "workers": workers, "models": models}


class RoutedEngineClient:
    """Embedded mode with several models (QASSIST_MODELS): one engine per model in this
    process, each on a thread of its own, and each request handed to its model's engine. A
    request naming no model goes to the default; one naming a model not here is refused at
    once. The engines share the machine's cores: with the CPU budget (QASSIST_CPU_BUDGET, on
    by default here) they take turns, a step each, instead of thrashing them."""

    def __init__(self, clients: dict[str, LocalEngineClient], default: str) -> None:
        if default not in clients:
            raise ValueError(f"the default model {default!r} is not among {sorted(clients)}")
        self.clients = clients
        self.default = default
        self._asked: dict[str, LocalEngineClient] = {}

    def start(self) -> None:
        for client in self.clients.values():
            client.start()

    def _client(self, model: str) -> LocalEngineClient | None:
        return self.clients.get(model or self.default)

    async def served_models(self) -> list[str]:
        served: list[str] = []
        for client in self.clients.values():
            served += await client.served_models()
        return served

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        client = self._client(sub.model)
        if client is None:
            yield Failed(
                sub.request_id,
                ErrorCode.WORKER_DOWN.value,
                f"No engine serves the model '{sub.model}' in this process.",
            )
            return
        self._asked[sub.request_id] = client
        try:
            async for event in client.generate(replace(sub, model=client.model)):
                yield event
        finally:
            self._asked.pop(sub.request_id, None)

    async def cancel(self, request_id: str) -> None:
        client = self._asked.get(request_id)
        if client is not None:
            await client.cancel(request_id)

    def at_capacity(self, model: str = "") -> bool:
        client = self._client(model)
        return client is not None and client.at_capacity()

    async def health(self) -> dict[str, Any]:
        parts = [await client.health() for client in self.clients.values()]
        return {
            "mode": "embedded",
            "ok": all(part["ok"] for part in parts),
            "workers": [w for part in parts for w in part.get("workers", [])],
            "models": list(self.clients),
            "errors": {
                name: part["error"]
                for name, part in zip(self.clients, parts, strict=True)
                if "error" in part
            },
        }
