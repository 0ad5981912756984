"""`python -m qassist.supervise PROCFILE`: start every process of a Procfile and keep it running.

What `make run` uses instead of honcho, which stops every process when one of them dies. Here a
process that exits, for whatever reason, is started again after a back-off (1 s, 2 s, 4 s, ... up
to 30 s; back to 1 s once it has stayed up for a minute), with a log line saying so, while the
other processes go on serving. Ctrl-C or SIGTERM stops them all: each gets SIGTERM (the inference
worker drains), and what is still running after the stop timeout gets SIGKILL.

Each process runs in its own session (process group) through `/bin/sh -c "exec COMMAND"`, so
`${VAR:-default}` works as in a Procfile and a signal reaches the whole group. Its output is
printed line by line, prefixed with the time and its name, like honcho's.

Production machines use systemd units with the same semantics instead (docs/deploy.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TextIO

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
POLL_SECONDS = 0.2


class ProcfileError(ValueError):
    pass


def parse_procfile(text: str) -> list[tuple[str, str]]:
    """(name, command) pairs of a Procfile; comments and blank lines are skipped."""
    entries: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PROCFILE_LINE.match(line)
        if match is None:
            raise ProcfileError(f"line {number}: expected 'name: command', got {line!r}")
        name, command = match.groups()
        if any(name == seen for seen, _ in entries):
            raise ProcfileError(f"line {number}: process {name!r} is defined twice")
        entries.append((name, command.strip()))
    if not entries:
        raise ProcfileError("no process is defined")
    return entries


def worker_per_model(
    entries: list[tuple[str, str]], models: Sequence[str]
) -> list[tuple[str, str]]:
    """The Procfile's `worker` entry once per model (issue #36): `worker-1`, `worker-2`, ...
    each running the same command with `--model NAME`, so each model has an engine of its own
    and each worker takes only its model's requests. No models: the entries as they are."""
    models = [m.strip() for m in models if m.strip()]
    if not models:
        return entries
    if not any(name == "worker" for name, _ in entries):
        raise ProcfileError("several models were asked for, but no process is named 'worker'")
    out: list[tuple[str, str]] = []
    for name, command in entries:
        if name != "worker":
            out.append((name, command))
            continue
        for number, model in enumerate(models, start=1):
            out.append((f"worker-{number}", f"{command} --model {shlex.quote(model)}"))
    return out


@dataclass(frozen=True)
class Backoff:
    """Delay before the n-th restart in a row of a process that keeps failing."""

    initial: float = 1.0
    maximum: float = 30.0
    reset_after: float = 60.0  # a process up this long is healthy again: its next delay is initial

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return float(min(self.maximum, self.initial * 2 ** (failures - 1)))


@dataclass
class Program:
    name: str
    command: str
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0  # exits in a row without staying up `reset_after` seconds
    restarts: int = 0
    restart_at: float | None = None
    pumps: list[threading.Thread] = field(default_factory=list)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


class Supervisor:
    def __init__(
        self,
        entries: Sequence[tuple[str, str]],
        *,
        backoff: Backoff | None = None,
        stop_timeout: float = 40.0,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.programs = [Program(name, command) for name, command in entries]
        self.backoff = backoff or Backoff()
        self.stop_timeout = stop_timeout
        self.env = env if env is not None else dict(os.environ)
        self.cwd = cwd
        self.out = out or sys.stdout
        self.clock = clock
        self.stopping = False
        self._width = max(len(p.name) for p in self.programs) + 1  # "supervise" lines too
        self._width = max(self._width, len("supervise"))
        self._lock = threading.Lock()

    # --- output ----------------------------------------------------------------------------

    def say(self, name: str, text: str) -> None:
        with self._lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name:<{self._width}} | {text}\n")
            self.out.flush()

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(name, raw.decode("utf-8", errors="replace").rstrip("\n"))
        stream.close()

    # --- processes ---------------------------------------------------------------------------

    def start(self, program: Program) -> None:
        # The command comes from the operator's own Procfile, as with honcho or foreman.
        process = subprocess.Popen(  # noqa: S603
            ["/bin/sh", "-c", f"exec {program.command}"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        program.process = process
        program.started_at = self.clock()
        program.restart_at = None
        assert process.stdout is not None
        pump = threading.Thread(target=self._pump, args=(program.name, process.stdout), daemon=True)
        pump.start()
        program.pumps = [pump]
        self.say("supervise", f"{program.name} started (pid {process.pid})")

    def start_all(self) -> None:
        for program in self.programs:
            self.start(program)

    def poll(self) -> None:
        """Notice processes that exited, schedule their restart, and start those now due."""
        now = self.clock()
        for program in self.programs:
            process = program.process
            if process is not None:
                code = process.poll()
                if code is None:
                    continue
                program.process = None
                for pump in program.pumps:
                    pump.join(1.0)  # its last lines are printed before the exit is announced
                if self.stopping:
                    continue
                uptime = now - program.started_at
                program.failures = 1 if uptime >= self.backoff.reset_after else program.failures + 1
                delay = self.backoff.delay(program.failures)
                program.restart_at = now + delay
                self.say(
                    "supervise",
                    f"{program.name} exited with {describe_exit(code)} after {uptime:.1f} s; "
                    f"restarting in {delay:g} s (restart #{program.restarts + 1}); "
                    "the other processes keep running",
                )
            elif not self.stopping and program.restart_at is not None and now >= program.restart_at:
                program.restarts += 1
                self.start(program)

    def signal_all(self, signum: int) -> None:
        for program in self.programs:
            if program.process is not None and program.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(program.process.pid, signum)

    def stop(self) -> None:
        """SIGTERM to every process group, then SIGKILL to what outlives the stop timeout."""
        self.stopping = True
        running = [p.name for p in self.programs if p.process is not None]
        self.say("supervise", f"stopping {', '.join(running) or 'nothing'} (SIGTERM)")
        self.signal_all(signal.SIGTERM)
        deadline = self.clock() + self.stop_timeout
        while self.clock() < deadline and any(
            p.process is not None and p.process.poll() is None for p in self.programs
        ):
            time.sleep(POLL_SECONDS)
        late = [p.name for p in self.programs if p.process is not None and p.process.poll() is None]
        if late:
            self.say("supervise", f"{', '.join(late)} still running: SIGKILL")
            self.signal_all(signal.SIGKILL)
        for program in self.programs:
            if program.process is not None:
                program.process.wait()
            for pump in program.pumps:
                pump.join(1.0)
        self.say("supervise", "all processes stopped")

    def run(self) -> int:
        stop_requested = threading.Event()

        def on_signal(signum: int, frame: object) -> None:
            if stop_requested.is_set():  # a second Ctrl-C: no more waiting
                self.stop_timeout = 0.0
                self.signal_all(signal.SIGKILL)
            stop_requested.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start_all()
            while not stop_requested.is_set():
                self.poll()
                stop_requested.wait(POLL_SECONDS)
            self.stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qassist.supervise",
        description="Run the processes of a Procfile, restarting any that exits, with back-off.",
    )
    parser.add_argument("procfile", type=Path)
    parser.add_argument("--backoff-initial", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--backoff-max", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument(
        "--reset-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="uptime after which a process's back-off starts again from the initial delay",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=40.0,
        metavar="SECONDS",
        help="on Ctrl-C / SIGTERM, how long processes get to exit before SIGKILL "
        "(longer than the inference worker's drain timeout)",
    )
    parser.add_argument(
        "--models",
        default="",
        metavar="A,B",
        help="run the Procfile's 'worker' once per model (comma-separated), with --model",
    )
    args = parser.parse_args(argv)
    try:
        entries = worker_per_model(
            parse_procfile(args.procfile.read_text()), args.models.split(",")
        )
    except (OSError, ProcfileError) as exc:
        parser.error(f"{args.procfile}: {exc}")
    supervisor = Supervisor(
        entries,
        backoff=Backoff(args.backoff_initial, args.backoff_max, args.reset_after),
        stop_timeout=args.stop_timeout,
        cwd=args.procfile.resolve().parent,
    )
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
