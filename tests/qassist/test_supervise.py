"""`python -m qassist.supervise`: what `make run` runs its processes under."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qassist.supervise import (
    Backoff,
    ProcfileError,
    Supervisor,
    parse_procfile,
    worker_per_model,
)

REPO = Path(__file__).resolve().parents[2]

# A process that records its pid, then idles until it is signalled.
IDLER = (
    "{python} -c 'import os, sys, time; "
    'open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(600)'
    "' {pidfile}"
)


def wait_for(condition, what: str, timeout: float = 30.0):
    """Poll until `condition()` is truthy; generous, since the machine may be busy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_procfile_is_read_as_named_commands_skipping_comments() -> None:
    text = "# comment\n\nweb: daphne -p ${PORT:-8000} x:y\nworker:python manage.py w\n"
    assert parse_procfile(text) == [
        ("web", "daphne -p ${PORT:-8000} x:y"),
        ("worker", "python manage.py w"),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no process"),
        ("web daphne\n", "expected 'name: command'"),
        ("web: a\nweb: b\n", "defined twice"),
    ],
)
def test_a_malformed_procfile_is_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(ProcfileError, match=problem):
        parse_procfile(text)


def test_several_models_run_the_worker_once_each_with_its_model() -> None:
    entries = parse_procfile(
        "web: daphne qassist.asgi:application\nworker: python manage.py run_inference_worker\n"
    )

    assert worker_per_model(entries, ["qwen2.5-coder-0.5b", " qwen2.5-coder-1.5b"]) == [
        ("web", "daphne qassist.asgi:application"),
        ("worker-1", "python manage.py run_inference_worker --model qwen2.5-coder-0.5b"),
        ("worker-2", "python manage.py run_inference_worker --model qwen2.5-coder-1.5b"),
    ]
    assert worker_per_model(entries, [""]) == entries  # MODELS unset: one worker, as before


def test_models_without_a_worker_process_are_refused() -> None:
    with pytest.raises(ProcfileError, match="no process is named 'worker'"):
        worker_per_model(parse_procfile("web: daphne x\n"), ["a", "b"])


def test_the_backoff_doubles_up_to_its_maximum() -> None:
    backoff = Backoff(initial=1, maximum=30)
    assert [backoff.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_a_process_that_keeps_failing_is_restarted_with_growing_delays() -> None:
    now = [1000.0]
    out = io.StringIO()
    supervisor = Supervisor(
        [("flaky", "sh -c 'exit 3'")],
        backoff=Backoff(initial=1, maximum=4, reset_after=60),
        out=out,
        clock=lambda: now[0],
    )
    program = supervisor.programs[0]
    supervisor.start_all()
    for _ in range(4):
        assert program.process is not None
        program.process.wait()
        supervisor.poll()  # notices the exit and schedules the restart
        assert program.process is None
        assert program.restart_at is not None
        supervisor.poll()  # not due yet: nothing starts
        assert program.process is None
        now[0] = program.restart_at
        supervisor.poll()  # due: started again
    assert program.process is not None
    program.process.wait()
    lines = [line for line in out.getvalue().splitlines() if "exited" in line]
    assert len(lines) == 4
    assert all("flaky exited with code 3" in line for line in lines)
    delays = [line.split("restarting in ")[1].split(" s")[0] for line in lines]
    assert delays == ["1", "2", "4", "4"]
    assert program.restarts == 4


def test_a_process_that_stayed_up_long_enough_restarts_after_the_initial_delay() -> None:
    now = [0.0]
    out = io.StringIO()
    supervisor = Supervisor(
        [("p", "true")], backoff=Backoff(1, 30, reset_after=60), out=out, clock=lambda: now[0]
    )
    program = supervisor.programs[0]
    program.failures = 5  # it had been failing before
    supervisor.start_all()
    assert program.process is not None
    program.process.wait()
    now[0] = 61.0
    supervisor.poll()
    assert program.failures == 1
    assert "restarting in 1 s" in out.getvalue()


def test_stop_sends_sigterm_and_kills_what_ignores_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "stubborn.pid"
    stubborn = (
        f"{sys.executable} -c 'import os, signal, sys, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        'open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(600)'
        f"' {pidfile}"
    )
    out = io.StringIO()
    supervisor = Supervisor([("stubborn", stubborn)], stop_timeout=0.5, out=out)
    supervisor.start_all()
    pid = wait_for(lambda: read_pid(pidfile), "the process to start")
    supervisor.stop()
    assert not alive(pid)
    assert "stubborn still running: SIGKILL" in out.getvalue()
    assert "all processes stopped" in out.getvalue()


def test_make_runs_supervisor_restarts_a_killed_process_and_keeps_the_others_running(
    tmp_path: Path,
) -> None:
    steady_pid, flaky_pid = tmp_path / "steady.pid", tmp_path / "flaky.pid"
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "# two idle processes\n"
        f"steady: {IDLER.format(python=sys.executable, pidfile=steady_pid)}\n"
        f"flaky: {IDLER.format(python=sys.executable, pidfile=flaky_pid)}\n"
    )
    log = tmp_path / "supervise.log"
    with log.open("w") as out:
        # Fixed arguments: this interpreter running the repository's own module.
        supervisor = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "qassist.supervise", str(procfile), "--backoff-initial", "0.1"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        steady = wait_for(lambda: read_pid(steady_pid), "steady to start")
        first = wait_for(lambda: read_pid(flaky_pid), "flaky to start")
        flaky_pid.write_text("")
        os.kill(first, signal.SIGKILL)

        second = wait_for(lambda: read_pid(flaky_pid), "flaky to be restarted")
        assert second != first
        assert alive(second)
        assert read_pid(steady_pid) == steady
        assert alive(steady), "the other process was stopped with the one that died"
        text = log.read_text()
        assert "flaky exited with signal SIGKILL" in text
        assert "restarting in 0.1 s (restart #1)" in text
        assert supervisor.poll() is None

        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(30) == 0
        assert not alive(steady)
        assert not alive(second)
        assert "all processes stopped" in log.read_text()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
