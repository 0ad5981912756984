"""Scripted reliability runs against real processes, the embedded model and a private Redis.

    python -m bench.reliability supervise     # make run's supervision: kill -9 the worker
    python -m bench.reliability redis-restart # Redis killed under a streaming reply, restarted
    python -m bench.reliability scale-out     # 2 web + 2 workers, one worker killed mid-load
    python -m bench.reliability worker-upgrade # a worker stopped and started again: warm?

Each run starts everything it needs in a temporary folder (its own redis-server on a free port,
never the shared one; SQLite, or PostgreSQL for scale-out when one answers), prints what it
measured as JSON and a verdict, and exits non-zero when a check fails. docs/RELIABILITY.md
records the results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import websockets

from bench.company import make_accounts
from bench.run import free_port, login_cookie, process, worker_stats

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
LONG_PROMPT = "Write a long, detailed story about a lighthouse keeper and a storm."


# --- plumbing ---------------------------------------------------------------------------------


class PrivateRedis:
    """A redis-server of our own on a free port, without persistence: a restart loses every
    key, as after a crash."""

    def __init__(self, workdir: Path) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise SystemExit("redis-server is not installed")
        self.server = server
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@contextmanager
def private_redis(workdir: Path) -> Iterator[str]:
    server = PrivateRedis(workdir)
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


def base_env(workdir: Path, redis_url: str, database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.pop("DEBUG", None)
    env.update(
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="qassist.settings",
        DATABASE_URL=database_url,
        QASSIST_VAR_DIR=str(workdir),
        REDIS_URL=redis_url,
        QASSIST_REDIS_PREFIX=f"rel-{uuid.uuid4().hex[:8]}",
        QASSIST_MODEL=str(MODEL),
        QASSIST_PARALLEL="4",
        QASSIST_CONTEXT_SIZE="4096",
        QASSIST_MAX_SEQ_TOKENS="1024",
        QASSIST_DEFAULT_TEMPERATURE="0",
        QASSIST_GENERATE_TITLES="0",
        QASSIST_WORKER_HEARTBEAT_SECONDS="3",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def reply_statuses(env: dict[str, str]) -> dict[str, int]:
    script = (
        "import json\n"
        "from django.db.models import Count\n"
        "from chat.models import Message\n"
        "rows = Message.objects.filter(role='assistant').values('status')"
        ".annotate(n=Count('id'))\n"
        "print(json.dumps({r['status']: r['n'] for r in rows}))\n"
    )
    return dict(json.loads(manage(env, "shell", "-c", script).strip().splitlines()[-1]))


def health(base: str) -> tuple[int, dict[str, Any]]:
    try:
        response = httpx.get(f"{base}/healthz", timeout=3)
    except httpx.HTTPError as exc:
        return 0, {"error": str(exc)}
    return response.status_code, response.json()


def wait_healthy(base: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health(base)[0] == 200:
            return
        time.sleep(0.3)
    raise RuntimeError(f"{base}/healthz not 200 within {timeout} s: {health(base)}")


@dataclass
class Outcome:
    """One request as its websocket client saw it."""

    web: int
    sent: float
    first_delta: float | None = None
    queued: bool = False
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    status: str = ""  # the reply's final status (reply.done), or "" when none came
    content_chars: int = 0
    ended: float = 0.0
    terminal_frames: int = 0
    session: str = ""


async def chat_once(
    url: str,
    origin: str,
    cookie: str,
    prompt: str,
    web: int,
    on_delta: Any = None,
    session: str | None = None,
) -> Outcome:
    outcome = Outcome(web=web, sent=time.monotonic())
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(
        url,
        origin=origin,  # type: ignore[arg-type]
        additional_headers=headers,
    ) as ws:
        await ws.send(json.dumps({"type": "chat.send", "session": session, "content": prompt}))
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 300))
            kind = frame["type"]
            if kind == "reply.start":
                outcome.session = str(frame["session"]["id"])
            elif kind == "queued":
                outcome.queued = True
            elif kind == "delta" and outcome.first_delta is None:
                outcome.first_delta = time.monotonic()
                if on_delta is not None:
                    on_delta()
            elif kind == "error":
                outcome.errors.append(frame["code"])
                outcome.messages.append(frame.get("message", ""))
                if "reply_id" not in frame:  # refused before a reply existed
                    outcome.terminal_frames += 1
                    break
            elif kind == "reply.done":
                outcome.terminal_frames += 1
                outcome.status = frame["reply"]["status"]
                outcome.content_chars = len(frame["reply"]["content"])
                break
        outcome.ended = time.monotonic()
        # Anything else arriving for this request would be a second terminal state.
        with suppress(TimeoutError, websockets.ConnectionClosed):
            extra = json.loads(await asyncio.wait_for(ws.recv(), 0.3))
            if extra.get("type") in ("reply.done", "error"):
                outcome.terminal_frames += 1
    return outcome


def run_task(env: dict[str, str], celery_log: Path, timeout: float) -> bool:
    """Send chat.tasks.interrupt_stale_replies through the broker; True once the Celery
    worker logs it as succeeded."""
    script = "from chat.tasks import interrupt_stale_replies as t\nprint(t.delay().id)\n"
    task_id = manage(env, "shell", "-c", script).strip().splitlines()[-1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(rf"{task_id}\] succeeded", celery_log.read_text(errors="replace")):
            return True
        time.sleep(0.2)
    return False


def beat_task_ran(
    beat_log: Path, beat_offset: int, celery_log: Path, celery_offset: int, timeout: float
) -> bool:
    """True once beat's log, past `beat_offset`, shows interrupt-stale-replies sent, and the
    worker's log, past `celery_offset`, shows more than the one such task run_task sent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sent = "Sending due task interrupt-stale-replies" in beat_log.read_bytes()[
            beat_offset:
        ].decode(errors="replace")
        done = re.findall(
            r"chat\.tasks\.interrupt_stale_replies\[[^\]]+\] succeeded",
            celery_log.read_bytes()[celery_offset:].decode(errors="replace"),
        )
        if sent and len(done) >= 2:
            return True
        time.sleep(0.5)
    return False


def pid_of(log: Path, name: str) -> int | None:
    found = re.findall(rf"\b{name} started \(pid (\d+)\)", log.read_text(errors="replace"))
    return int(found[-1]) if found else None


def verdict(checks: dict[str, bool]) -> int:
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


# --- supervise: make run's process supervision ------------------------------------------------


def run_supervise(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="qassist-rel-") as tmp, private_redis(Path(tmp)) as url:
        workdir = Path(tmp)
        env = base_env(
            workdir,
            url,
            f"sqlite:///{workdir / 'db.sqlite3'}",
            QASSIST_DEFAULT_MAX_TOKENS=str(args.max_tokens),
        )
        manage(env, "migrate", "--noinput", "-v", "0")
        (workdir / "celery" / "queue").mkdir(parents=True)
        cookie = login_cookie(env)
        port = free_port()
        base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
        procfile = workdir / "Procfile"
        procfile.write_text(
            f"web: {PYTHON} -m daphne -b 127.0.0.1 -p {port} qassist.asgi:application\n"
            f"worker: {PYTHON} {ROOT}/manage.py run_inference_worker\n"
            f"celery: {PYTHON} -m celery -A qassist worker --loglevel WARNING --pool solo\n"
            f"beat: {PYTHON} -m celery -A qassist beat --loglevel WARNING "
            f"-s {workdir / 'beat-schedule'}\n"
        )
        log = workdir / "supervise.log"
        supervise = [PYTHON, "-m", "qassist.supervise", str(procfile)]
        with process(supervise, env, log):
            wait_healthy(base)
            _, before = health(base)
            started_before = {w["id"]: w["started_at"] for w in before["engine"]["workers"]}
            pids_before = {n: pid_of(log, n) for n in ("web", "worker", "celery", "beat")}
            worker_pid = pids_before["worker"]
            assert worker_pid is not None

            killed_at: list[float] = []
            deltas = [0]

            def on_delta() -> None:
                deltas[0] += 1
                if deltas[0] == args.clients and not killed_at:
                    os.kill(worker_pid, signal.SIGKILL)
                    killed_at.append(time.monotonic())

            async def one() -> Outcome:
                outcome = await chat_once(ws_url, base, cookie, LONG_PROMPT, 0, on_delta)
                if not killed_at:  # ended before every client streamed: kill now anyway
                    on_delta_count_as_all()
                return outcome

            def on_delta_count_as_all() -> None:
                deltas[0] = args.clients - 1
                on_delta()

            async def load() -> list[Outcome]:
                return list(await asyncio.gather(*(one() for _ in range(args.clients))))

            # Watch /healthz from before the kill until a new worker reports.
            seen: list[tuple[float, int, tuple[str, ...], dict[str, Any]]] = []
            watching = threading.Event()

            def watch() -> None:
                while not watching.is_set():
                    status, body = health(base)
                    ids = tuple(w["id"] for w in body.get("engine", {}).get("workers", []))
                    if not seen or seen[-1][1:3] != (status, ids):
                        down = {p: body.get(p, {}).get("error") for p in body.get("down", [])}
                        seen.append((time.monotonic(), status, ids, down))
                    time.sleep(0.1)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            outcomes = asyncio.run(load())
            kill = killed_at[0]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (
                seen
                and seen[-1][1] == 200
                and seen[-1][2]
                and not set(seen[-1][2]) & set(started_before)
            ):
                time.sleep(0.2)
            watching.set()
            watcher.join()
            first_503 = next((t for t, status, _, _ in seen if t > kill and status == 503), None)
            recovered = next(
                (
                    t
                    for t, status, ids, _ in seen
                    if status == 200 and set(ids) - set(started_before)
                ),
                None,
            )
            after_outcome = asyncio.run(chat_once(ws_url, base, cookie, "Say OK.", 0))
            pids_after = {n: pid_of(log, n) for n in ("web", "worker", "celery", "beat")}
            statuses = reply_statuses(env)
            supervisor_log = log.read_text(errors="replace")
        cut = [o for o in outcomes if o.status]
        measured = {
            "clients": args.clients,
            "replies_cut_status": Counter(o.status for o in outcomes),
            "streamed_before_the_kill": sum(
                1 for o in outcomes if o.first_delta and o.first_delta <= kill
            ),
            "error_codes": Counter(c for o in outcomes for c in o.errors),
            "all_kept_text": all(o.content_chars > 0 for o in cut),
            "seconds_kill_to_last_reply_ended": round(max(o.ended for o in outcomes) - kill, 2),
            "seconds_kill_to_healthz_503": round(first_503 - kill, 2) if first_503 else None,
            "healthz_seen": [
                {"at": round(t - kill, 2), "status": status, "workers": list(ids), "down": down}
                for t, status, ids, down in seen
            ],
            "seconds_kill_to_healthz_200_with_new_worker": (
                round(recovered - kill, 2) if recovered else None
            ),
            "reply_after_recovery": {
                "status": after_outcome.status,
                "errors": after_outcome.errors,
                "messages": after_outcome.messages,
                "chars": after_outcome.content_chars,
            },
            "pids_before": pids_before,
            "pids_after": pids_after,
            "database_reply_statuses": statuses,
            "restart_log_lines": [
                line.split("| ", 1)[1]
                for line in supervisor_log.splitlines()
                if "supervise" in line and ("exited" in line or "worker started" in line)
            ],
        }
        print(json.dumps(measured, indent=2, default=str))
        return verdict(
            {
                "every cut reply ended interrupted with its text kept": (
                    len(cut) == args.clients
                    and all(o.status == "interrupted" for o in cut)
                    and measured["all_kept_text"]
                ),
                "each client heard worker_down": all(o.errors == ["worker_down"] for o in outcomes),
                "/healthz shows the restart: the killed worker leaves, a new one reports": bool(
                    recovered
                    and seen[-1][1] == 200
                    and set(seen[-1][2])
                    and not set(started_before) & set(seen[-1][2])
                ),
                "the worker was restarted by the supervisor": (
                    pids_after["worker"] not in (None, worker_pid)
                    and "worker exited with signal SIGKILL" in supervisor_log
                ),
                "web, celery and beat kept running (same pids)": all(
                    pids_after[n] == pids_before[n] for n in ("web", "celery", "beat")
                ),
                "a new message after recovery completed": after_outcome.status == "complete",
                "no reply left streaming in the database": statuses.get("streaming", 0) == 0,
            }
        )


# --- redis-restart: Redis dies under a web process and a worker, and comes back -----------------


def run_redis_restart(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="qassist-rel-") as tmp:
        workdir = Path(tmp)
        server = PrivateRedis(workdir)
        server.start()
        try:
            return _redis_restart(args, workdir, server)
        finally:
            server.kill()


def _redis_restart(args: argparse.Namespace, workdir: Path, server: PrivateRedis) -> int:
    env = base_env(
        workdir,
        server.url,
        f"sqlite:///{workdir / 'db.sqlite3'}",
        QASSIST_DEFAULT_MAX_TOKENS=str(args.max_tokens),
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    cookie = login_cookie(env)
    port = free_port()
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
    daphne = [
        PYTHON,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "qassist.asgi:application",
    ]
    celery = [PYTHON, "-m", "celery", "-A", "qassist", "worker", "--loglevel", "INFO"]
    celery += ["--pool", "solo", "--without-mingle", "--without-gossip"]
    celery_log = workdir / "celery.log"
    beat = [PYTHON, "-m", "celery", "-A", "qassist", "beat", "--loglevel", "INFO"]
    beat += ["-s", str(workdir / "beat-schedule")]
    beat_log = workdir / "beat.log"
    with (
        process([PYTHON, "manage.py", "run_inference_worker"], env, workdir / "worker.log") as w,
        process(daphne, env, workdir / "web.log") as web,
        process(celery, env, celery_log) as celery_proc,
        process(beat, env, beat_log) as beat_proc,
    ):
        wait_healthy(base)
        task_before = run_task(env, celery_log, timeout=120)
        killed: list[float] = []

        def on_delta() -> None:
            if not killed:
                server.kill()
                killed.append(time.monotonic())

        in_flight = asyncio.run(chat_once(ws_url, base, cookie, LONG_PROMPT, 0, on_delta))
        down_status, down_body = health(base)
        time.sleep(args.down_seconds)
        server.start()
        back = time.monotonic()
        beat_offset = len(beat_log.read_bytes())
        celery_offset = len(celery_log.read_bytes())
        attempts: list[Outcome] = []
        while time.monotonic() - back < 60:
            outcome = asyncio.run(chat_once(ws_url, base, cookie, "Say OK.", 0))
            attempts.append(outcome)
            if outcome.status == "complete":
                break
            time.sleep(0.25)
        first_success = attempts[-1].ended - back if attempts[-1].status == "complete" else None
        # Celery's worker reconnects to its broker by itself too: a task sent now is run.
        task_after = run_task(env, celery_log, timeout=120)
        task_after_seconds = time.monotonic() - back if task_after else None
        # Celery beat reconnects too: its next periodic task (every 30 s) is sent and run.
        beat_ran = beat_task_ran(beat_log, beat_offset, celery_log, celery_offset, timeout=75)
        beat_seconds = time.monotonic() - back if beat_ran else None
        still_running = all(p.poll() is None for p in (w, web, celery_proc, beat_proc))
        statuses = reply_statuses(env)
    measured = {
        "in_flight": {
            "status": in_flight.status,
            "errors": in_flight.errors,
            "messages": in_flight.messages,
            "chars_kept": in_flight.content_chars,
            "seconds_kill_to_end": round(in_flight.ended - killed[0], 2),
        },
        "healthz_while_down": {"status": down_status, "down": down_body.get("down")},
        "redis_down_seconds": args.down_seconds,
        "attempts_after_redis_came_back": [
            {"status": o.status or "refused", "errors": o.errors} for o in attempts
        ],
        "seconds_redis_back_to_first_completed_reply": (
            round(first_success, 2) if first_success is not None else None
        ),
        "celery_task_ran_before": task_before,
        "celery_task_ran_after_redis_came_back": task_after,
        "seconds_redis_back_to_celery_task_done": (
            round(task_after_seconds, 2) if task_after_seconds is not None else None
        ),
        "seconds_redis_back_to_beat_task_run": (
            round(beat_seconds, 2) if beat_seconds is not None else None
        ),
        "web_worker_celery_and_beat_never_restarted": still_running,
        "database_reply_statuses": statuses,
    }
    print(json.dumps(measured, indent=2))
    return verdict(
        {
            "the reply in flight ended clearly (worker_down), its text kept": (
                in_flight.errors == ["worker_down"]
                and in_flight.status == "interrupted"
                and in_flight.content_chars > 0
            ),
            "/healthz named redis while it was down": down_status == 503
            and "redis" in (down_body.get("down") or []),
            "a new reply completed after Redis came back": first_success is not None,
            "the same web process, worker, Celery worker and beat reconnected by themselves": (
                still_running
            ),
            "Celery ran a task after Redis came back": task_before and task_after,
            "Celery beat sent its periodic task after Redis came back, and it ran": beat_ran,
            "no reply left streaming in the database": statuses.get("streaming", 0) == 0,
        }
    )


# --- worker-upgrade: a worker stopped (drained) and started again ------------------------------

UPGRADE_GAMES = ["chess", "checkers", "go", "backgammon", "poker", "bridge", "mahjong", "shogi"]
UPGRADE_TURNS = [
    "Describe the rules of {game} in a few sentences.",
    "What is the most important strategy in {game}, and why?",
]


def run_worker_upgrade(args: argparse.Namespace) -> int:
    """Conversations, then the worker stopped with SIGTERM (as an upgrade or a systemd restart
    does) and a new one started on the same folder: do their next turns find their history?
    Once with the host cache's disk tier (the default), once without it."""
    results = {}
    for disk_mb in (4096, 0):
        with (
            tempfile.TemporaryDirectory(prefix="qassist-rel-") as tmp,
            private_redis(Path(tmp)) as redis_url,
        ):
            results[disk_mb] = _worker_upgrade(args, Path(tmp), redis_url, disk_mb)
    print(json.dumps({f"disk {mb} MB": r for mb, r in results.items()}, indent=2))
    on, off = results[4096], results[0]
    n = args.conversations
    return verdict(
        {
            "every conversation's turns completed, before and after the restart": on["ok"]
            and off["ok"],
            "the stopped worker wrote its kept conversations to disk": on["saved_on_disk"] >= n,
            "after the restart, every follow-up restored its history from disk": (
                on["after"]["follow_ups_warm"] == on["after"]["follow_ups"] == n
                and on["after"]["restored_tokens"] > 0
            ),
            "without the disk tier, none did (the control)": off["after"]["follow_ups_warm"] == 0
            and off["after"]["restored_tokens"] == 0,
            "no reply left streaming in the database": on["statuses"].get("streaming", 0) == 0
            and off["statuses"].get("streaming", 0) == 0,
        }
    )


def _worker_upgrade(
    args: argparse.Namespace, workdir: Path, redis_url: str, disk_mb: int
) -> dict[str, Any]:
    env = base_env(
        workdir,
        redis_url,
        f"sqlite:///{workdir / 'db.sqlite3'}",
        QASSIST_DEFAULT_MAX_TOKENS=str(args.max_tokens),
        QASSIST_PARALLEL=str(args.conversations + 1),
        QASSIST_HOST_CACHE_DISK_MB=str(disk_mb),
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    cookie = login_cookie(env)
    port = free_port()
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
    daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    daphne.append("qassist.asgi:application")
    worker_cmd = [PYTHON, "manage.py", "run_inference_worker"]

    async def turns(prompt: str, sessions: list[str | None]) -> list[Outcome]:
        # Each conversation about its own game: distinct histories, nothing shared but the
        # template (at temperature 0, equal prompts would make equal conversations).
        return list(
            await asyncio.gather(
                *(
                    chat_once(ws_url, base, cookie, prompt.format(game=game), 0, session=s)
                    for s, game in zip(sessions, UPGRADE_GAMES, strict=False)
                )
            )
        )

    ok = True
    with process(daphne, env, workdir / "web.log"):
        with process(worker_cmd, env, workdir / "worker-1.log") as first:
            wait_healthy(base)
            sessions: list[str | None] = [None] * args.conversations
            for prompt in UPGRADE_TURNS:
                done = asyncio.run(turns(prompt, sessions))
                ok = ok and all(o.status == "complete" for o in done)
                sessions = [o.session for o in done]
            before = worker_stats(base)
            first.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            first.wait(timeout=60)
            stop_seconds = time.monotonic() - stopped
        log = (workdir / "worker-1.log").read_text(errors="replace")
        found = re.search(r"(\d+) conversations saved on disk", log)
        with process(worker_cmd, env, workdir / "worker-2.log"):
            started = time.monotonic()
            wait_healthy(base)
            while worker_stats(base).get("id") == before.get("id"):
                time.sleep(0.2)  # the old worker's last heartbeat until it expires
            ready_seconds = time.monotonic() - started
            after_turn = asyncio.run(turns("And the most common mistake in {game}?", sessions))
            ok = ok and all(o.status == "complete" for o in after_turn)
            after = worker_stats(base)
    ttfts = sorted((o.first_delta or o.ended) - o.sent for o in after_turn)
    return {
        "ok": ok,
        "worker_stop_seconds": round(stop_seconds, 2),
        "saved_on_disk": int(found.group(1)) if found else 0,
        "new_worker_ready_seconds": round(ready_seconds, 2),
        "after": {
            "follow_ups": after.get("follow_ups", 0),
            "follow_ups_warm": after.get("follow_ups_warm", 0),
            "restored_tokens": after.get("restored_tokens", 0),
            "prefill_tokens": after.get("prefill_tokens", 0),
            "ttft_seconds": [round(t, 2) for t in ttfts],
            "disk_entries_at_start": after.get("host_cache_disk_entries", 0),
        },
        "statuses": reply_statuses(env),
    }


# --- scale-out: two web processes, two workers ------------------------------------------------


@contextmanager
def scale_out_database(args: argparse.Namespace, workdir: Path) -> Iterator[str]:
    if args.sqlite:
        yield f"sqlite:///{workdir / 'db.sqlite3'}"
        return
    name = f"qassist_scaleout_{uuid.uuid4().hex[:8]}"
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], check=True)
    try:
        yield f"postgres://postgres@127.0.0.1:5432/{name}"
    finally:
        subprocess.run(
            ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--force", name], check=False
        )


def run_scale_out(args: argparse.Namespace) -> int:
    with (
        tempfile.TemporaryDirectory(prefix="qassist-rel-") as tmp,
        private_redis(Path(tmp)) as url,
        scale_out_database(args, Path(tmp)) as database_url,
    ):
        workdir = Path(tmp)
        env = base_env(
            workdir,
            url,
            database_url,
            QASSIST_DEFAULT_MAX_TOKENS=str(args.max_tokens),
            QASSIST_THREADS="1",  # two workers share this machine's cores
            QASSIST_MAX_QUEUE="256",
        )
        prefix = env["QASSIST_REDIS_PREFIX"]
        manage(env, "migrate", "--noinput", "-v", "0")
        # One person per client, as in an office: the per-user stream limit (4) must not be
        # what decides how many run (it once turned most of one user's 12 clients away).
        cookies = make_accounts(env, {"bench": (args.clients, "")})["bench"]
        ports = [free_port(), free_port()]
        bases = [f"http://127.0.0.1:{p}" for p in ports]
        r = redis.Redis.from_url(url)
        with (
            process(
                [PYTHON, "manage.py", "run_inference_worker", "--worker-id", "w1"],
                env,
                workdir / "w1.log",
            ) as w1,
            process(
                [PYTHON, "manage.py", "run_inference_worker", "--worker-id", "w2"],
                env,
                workdir / "w2.log",
            ),
            process(
                [
                    PYTHON,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(ports[0]),
                    "qassist.asgi:application",
                ],
                env,
                workdir / "web1.log",
            ),
            process(
                [
                    PYTHON,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(ports[1]),
                    "qassist.asgi:application",
                ],
                env,
                workdir / "web2.log",
            ),
        ):
            for base in bases:
                wait_healthy(base)
            deadline = time.monotonic() + 120
            while len(health(bases[0])[1]["engine"]["workers"]) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the two workers did not both report")
                time.sleep(0.3)

            def finished(s: dict[str, Any]) -> int:
                return int(sum(s.get("finished", {}).values()))

            stats: dict[str, dict[str, Any]] = {}
            stats_at_kill: dict[str, dict[str, Any]] = {}
            killed_at: list[float] = []
            total = args.clients * args.requests
            # The most requests each worker was seen running at once before the kill.
            most_running: dict[str, int] = {"w1": 0, "w2": 0}

            def sample() -> None:
                for wid in ("w1", "w2"):
                    raw: Any = r.get(f"{prefix}:worker:{wid}")
                    if raw:
                        stats[wid] = json.loads(raw)
                        if not killed_at:
                            running = int(stats[wid].get("running", 0))
                            most_running[wid] = max(most_running[wid], running)

            def both_finished_some() -> bool:
                return all(finished(stats.get(w, {})) > 0 for w in ("w1", "w2"))

            async def killer(done: list[list[Outcome]]) -> None:
                # Kill once a third of the requests are done *and* both workers' heartbeats
                # (rewritten each second, so they lag the clients) show finished requests; if
                # that never happens by two thirds, kill anyway and let the checks say so.
                while True:
                    await asyncio.to_thread(sample)
                    n = sum(len(d) for d in done)
                    if (n >= total // 3 and both_finished_some()) or n >= 2 * total // 3:
                        break
                    await asyncio.sleep(0.1)
                stats_at_kill.update(json.loads(json.dumps(stats)))
                w1.kill()
                killed_at.append(time.monotonic())

            async def sampler() -> None:
                while True:
                    await asyncio.to_thread(sample)
                    await asyncio.sleep(0.5)

            async def load() -> list[Outcome]:
                done: list[list[Outcome]] = [[] for _ in range(args.clients)]

                async def client(i: int) -> None:
                    web = i % 2  # clients alternate between the two web processes
                    ws_url = f"ws://127.0.0.1:{ports[web]}/ws/chat/"
                    for j in range(args.requests):
                        prompt = f"Request {i}.{j}: {LONG_PROMPT}"
                        done[i].append(await chat_once(ws_url, bases[web], cookies[i], prompt, web))

                watcher = asyncio.create_task(sampler())
                kill_task = asyncio.create_task(killer(done))
                started = time.monotonic()
                await asyncio.gather(*(client(i) for i in range(args.clients)))
                watcher.cancel()
                if not kill_task.done():
                    kill_task.cancel()
                print(f"load took {time.monotonic() - started:.1f} s")
                return [o for d in done for o in d]

            outcomes = asyncio.run(load())
            time.sleep(2.5)  # the workers' stats keys are rewritten with each heartbeat (1 s)
            sample()
            statuses = reply_statuses(env)
        kill = killed_at[0] if killed_at else None
        after_kill = [o for o in outcomes if kill is not None and o.sent > kill]
        cut = [o for o in outcomes if "worker_down" in o.errors]

        measured = {
            "requests": len(outcomes),
            "by_status": Counter(o.status or "refused" for o in outcomes),
            "by_error": Counter(c for o in outcomes for c in o.errors),
            "by_web_process": Counter(f"web{o.web + 1}" for o in outcomes),
            "workers_at_kill": {
                w: {"finished": finished(s), "generated_tokens": s.get("generated_tokens")}
                for w, s in stats_at_kill.items()
            },
            "most_running_before_the_kill": most_running,
            "workers_at_end": {
                w: {"finished": finished(s), "generated_tokens": s.get("generated_tokens")}
                for w, s in stats.items()
            },
            "sent_after_kill": len(after_kill),
            "sent_after_kill_completed": sum(o.status == "complete" for o in after_kill),
            "cut_by_the_kill": len(cut),
            "cut_kept_text": all(o.content_chars > 0 for o in cut if o.first_delta),
            "terminal_frames_per_request": Counter(o.terminal_frames for o in outcomes),
            "database_reply_statuses": statuses,
        }
        print(json.dumps(measured, indent=2, default=str))
        w1_share = stats_at_kill.get("w1", {})
        w2_after = finished(stats.get("w2", {})) - finished(stats_at_kill.get("w2", {}))
        parallel = int(env["QASSIST_PARALLEL"])
        return verdict(
            {
                "the load was above one worker's sequences": args.clients > parallel,
                "both workers ran requests at once before the kill": all(
                    n > 0 for n in most_running.values()
                ),
                "both workers served requests before the kill": (
                    finished(w1_share) > 0 and finished(stats_at_kill.get("w2", {})) > 0
                ),
                "both web processes carried requests": len({o.web for o in outcomes}) == 2,
                "after the kill the other worker served the rest": (
                    w2_after > 0 and measured["sent_after_kill_completed"] == len(after_kill)
                ),
                "running requests on the dead worker ended with worker_down, at most its slots": (
                    0 < len(cut) <= 4 and all(o.status in ("interrupted", "error") for o in cut)
                ),
                "every request ended in exactly one terminal state": all(
                    o.terminal_frames == 1 for o in outcomes
                ),
                "the database agrees: nothing left streaming, counts match": (
                    statuses.get("streaming", 0) == 0
                    and sum(statuses.values()) == sum(1 for o in outcomes if o.status)
                ),
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability")
    sub = parser.add_subparsers(dest="scenario", required=True)
    sup = sub.add_parser("supervise", help="kill -9 the worker under the supervisor")
    sup.add_argument("--clients", type=int, default=4)
    sup.add_argument("--max-tokens", type=int, default=400)
    rr = sub.add_parser("redis-restart", help="Redis killed under a streaming reply, restarted")
    rr.add_argument("--max-tokens", type=int, default=300)
    rr.add_argument("--down-seconds", type=float, default=2.0)
    scale = sub.add_parser("scale-out", help="2 web + 2 workers, one worker killed mid-load")
    scale.add_argument("--clients", type=int, default=12)
    scale.add_argument("--requests", type=int, default=3, help="per client, back to back")
    scale.add_argument("--max-tokens", type=int, default=96)
    scale.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    up = sub.add_parser("worker-upgrade", help="a worker stopped and started: history kept?")
    up.add_argument("--conversations", type=int, default=3, choices=range(1, 9))
    up.add_argument("--max-tokens", type=int, default=60)
    args = parser.parse_args()
    if not MODEL.exists():
        raise SystemExit(f"{MODEL} is missing: python manage.py fetch_model smollm2-135m")
    runners = {
        "supervise": run_supervise,
        "redis-restart": run_redis_restart,
        "scale-out": run_scale_out,
        "worker-upgrade": run_worker_upgrade,
    }
    sys.exit(runners[args.scenario](args))


if __name__ == "__main__":
    main()
