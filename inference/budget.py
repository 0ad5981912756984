"""The host's compute turn: engines that share one machine's cores take turns, a step each.

Two llama.cpp engines stepping at once on 2 cores each start QASSIST_THREADS threads: four
threads on two cores, each step of each engine as slow as both together, and every stream's
speed falls for both models' users at once (issue #36, point 4). With a CPU budget an engine
runs a step (one `llama_decode` of its batch: the work that takes the cores) only while it
holds the host's turn, and hands the turn over when the step ends. Whichever engine has work
then gets every thread for its step; two busy engines alternate step by step; an idle engine
asks for nothing and costs its neighbour nothing.

- In one process (embedded mode, an engine per model on threads of the web process): a
  ticket lock, so turns go in the order they were asked for and an engine that asks again
  right after its step queues behind the one that waited (a plain lock would let it barge in).
- Across processes (Redis mode, a worker process per model): two `flock` files in a folder
  (`QASSIST_CPU_BUDGET_DIR`). The turn is `turn.lock`; to ask for it, an engine first takes
  `queue.lock`, waits for the turn, then lets the queue go. The holder that wants the turn
  again must pass the queue too, where the waiting engine sits: so it waits for it, and the
  turn goes to the other. A dead process's locks go with its file descriptors.

An engine holds the in-process turn first, then the file's: engines of one process queue for
the file's turn one at a time, engines of other processes beside them. No llama.cpp here.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)


class TicketLock:
    """A lock granted in the order it was asked for (threads of one process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = 0  # the next ticket to hand out
        self._serving = 0  # the ticket that holds the lock

    def acquire(self) -> None:
        with self._cond:
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._cond.wait()

    def release(self) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()

    @property
    def waiting(self) -> int:
        """Threads that asked and do not hold it yet."""
        with self._cond:
            return max(0, self._next - self._serving - 1)


class FileTurn:
    """One engine's seat at the host-wide turn kept in `folder` (its own file descriptors:
    `flock` locks belong to an open file, so two seats exclude each other in one process as
    across processes)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._queue = os.open(folder / "queue.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._turn = os.open(folder / "turn.lock", os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self) -> None:
        fcntl.flock(self._queue, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._turn, fcntl.LOCK_EX)
        finally:
            fcntl.flock(self._queue, fcntl.LOCK_UN)

    def release(self) -> None:
        fcntl.flock(self._turn, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in (self._queue, self._turn):
            os.close(fd)


class HostTurns:
    """The turns of this process's engines: one per process, shared by its engines; `folder`
    (None: this process only) extends them to every process on the host that uses it."""

    def __init__(self, folder: Path | None = None) -> None:
        self.local = TicketLock()
        self.folder = folder

    def seat(self) -> Turn:
        """A seat for one engine (each engine takes turns through its own)."""
        file_turn = None
        if self.folder is not None:
            try:
                file_turn = FileTurn(self.folder)
            except OSError as exc:
                logger.warning(
                    "the CPU budget is kept in this process only (%s is unusable: %s)",
                    self.folder,
                    exc,
                )
        return Turn(self.local, file_turn)


class Turn:
    """`with turn:` around one engine step: waits for the host's turn, holds it for the step,
    hands it over after. Counts how long it waited and how many turns it took (the engine's
    status reports both)."""

    def __init__(self, local: TicketLock, file_turn: FileTurn | None = None) -> None:
        self.local = local
        self.file_turn = file_turn
        self.waited = 0.0  # seconds spent waiting for the turn, in total
        self.taken = 0

    def __enter__(self) -> None:
        asked = time.monotonic()
        self.local.acquire()
        if self.file_turn is not None:
            try:
                self.file_turn.acquire()
            except BaseException:
                self.local.release()
                raise
        self.waited += time.monotonic() - asked
        self.taken += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.file_turn is not None:
                self.file_turn.release()
        finally:
            self.local.release()

    def close(self) -> None:
        if self.file_turn is not None:
            self.file_turn.close()
            self.file_turn = None
