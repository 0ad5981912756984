"""Company-shaped workloads (issue #9): conversations, more users than sequences, fair shares.

    python -m bench.company --model qwen2.5-coder-0.5b --scenario company --users 16,32,50
    python -m bench.company --scenario company --policies old,new   # the floor as a wall, then
                                                                    # yielding (issue #23)
    python -m bench.company --scenario turns          # 32 conversations x 6 turns, 16 sequences,
                                                      # host cache on, then off
    python -m bench.company --scenario fairness       # tenant A sends 40, then tenant B 4
    python -m bench.company --scenario long           # 8 streams, then a 2,000-token prompt

- **company**: U employees of one tenant whose system prompt is about 350 tokens, each holding
  a conversation of `--turns` turns with a think time of 0.5-2 s (seeded) between a reply and
  the next message (`--no-think`: none; with `BENCH_TITLES=1` that measures follow-ups sent
  the instant `reply.done` arrives while the title is written, review #21). qassist (daphne +
  websocket consumer + Redis + worker, one user account per employee) against llama.cpp's
  `llama-server` on the same workload over its OpenAI API (the whole history sent each turn,
  as OpenAI clients do), with `-np` matched to the users and the unified KV cache
  (`--kv-unified`), and `-np 16` too with `--server-np`.
  `--policies old,new` runs qassist twice in one run, each with a worker of its own: `old` is
  the speed floor as a wall (`QASSIST_TTFT_TARGET_SECONDS=0`), `new` yields to the first-token
  target (`--ttft-target`, `--hard-min-stream-speed`). Reported besides tokens/s and TTFT:
  each user's median stream speed (the slowest user's and the median user's), replies refused
  `busy` (the wait bound, `--max-wait`), how often and how long the floor yielded (the
  worker's counters), and the turns that waited in line with an estimated wait, with how far
  the first estimate was from the wait that followed.
- **scale-out**: the company workload (`--users`, e.g. 32) on one inference worker pinned to
  one core (`taskset`, one thread), then on two workers pinned to one core each, taking from
  the same shared queue (issue #24). Reported: tokens/s and its ratio to one worker, TTFT, warm
  follow-ups, and the replies and tokens each worker served.
- **turns**: 32 conversations of 6 turns over qassist with 16 sequences and the speed floor
  off, once with the host-memory cache and once without: per-turn TTFT, and how many
  follow-up turns found their history (the worker's counters).
- **fairness**: tenant A's 40 employees each send one request at once, then tenant B's 4 do;
  equal weights. Prints the order in which replies started.
- **long**: 8 streams decoding (16 sequences); their inter-token gaps over 8 s alone, then while
  a 2,000-token prompt is prefilled (from its send to its first token), and its TTFT.

Every number comes from outside (clients timing their streams), except the warm-turn counts,
which are the worker's. Prints markdown tables; paste them into docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.prompts import COMPANY_SYSTEM_PROMPT, FOLLOW_UPS, PROMPTS
from bench.run import (
    PYTHON,
    ROOT,
    free_port,
    process,
    qassist_env,
    wait_http,
)

THINK = (0.5, 2.0)  # seconds between a reply and the user's next message


@dataclass
class Turn:
    user: int
    turn: int
    tokens: int
    ttft: float
    duration: float
    sent_at: float
    first_at: float
    error: str = ""
    code: str = ""  # the error frame's code (busy: refused by the wait bound)
    # Queue frames heard while it waited: (seconds since sent, estimated wait or None).
    queued: list[tuple[float, float | None]] = field(default_factory=list)

    @property
    def stream_tps(self) -> float:
        generating = self.duration - self.ttft
        return (self.tokens - 1) / generating if generating > 0 and self.tokens > 1 else 0.0


@dataclass
class Run:
    system: str
    users: int
    wall: float = 0.0
    turns: list[Turn] = field(default_factory=list)
    worker: dict[str, Any] = field(default_factory=dict)
    load: tuple[str, str] = ("", "")
    # With several workers: worker id -> (replies finished, tokens generated) in this run.
    split: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def ok(self) -> list[Turn]:
        return [t for t in self.turns if not t.error]

    @property
    def tps(self) -> float:
        return sum(t.tokens for t in self.ok) / self.wall if self.wall else 0.0

    def ttft(self, q: float, turn: int | None = None) -> float:
        values = sorted(t.ttft for t in self.ok if turn is None or t.turn == turn)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    @property
    def busy(self) -> int:
        return sum(t.code == "busy" for t in self.turns)

    def estimates(self) -> tuple[int, int, float]:
        """Turns that waited in line, those told an estimated wait, and the median of (the
        wait that followed the first estimate) minus (that estimate), in seconds."""
        queued = [t for t in self.ok if t.queued]
        errors = []
        for t in queued:
            told = next(((at, e) for at, e in t.queued if e is not None), None)
            if told is not None:
                errors.append((t.ttft - told[0]) - told[1])
        return len(queued), len(errors), statistics.median(errors) if errors else float("nan")

    def stream_speeds(self) -> list[float]:
        """Each stream's speed: the median over a user's replies, one value per user."""
        per_user: dict[int, list[float]] = {}
        for t in self.ok:
            if t.stream_tps > 0:
                per_user.setdefault(t.user, []).append(t.stream_tps)
        return sorted(statistics.median(v) for v in per_user.values())


def all_worker_stats(base: str) -> list[dict[str, Any]]:
    """Every live worker's heartbeat numbers, as /healthz lists them."""
    health = httpx.get(f"{base}/healthz", timeout=5).json()
    return list(health.get("engine", {}).get("workers", []))


def finished(stats: dict[str, Any]) -> int:
    return int(sum((stats.get("finished") or {}).values()))


def summed(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """The workers' counters added up (numbers, and the TTFT histogram's sum and counts)."""
    if len(workers) == 1:
        return workers[0]
    total: dict[str, Any] = {}
    for stats in workers:
        for key, value in stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
        hist = (stats.get("histograms") or {}).get("ttft_seconds") or {}
        if hist:
            mine = total.setdefault("histograms", {}).setdefault(
                "ttft_seconds", {"sum": 0.0, "counts": [0] * len(hist.get("counts", []))}
            )
            mine["sum"] += hist.get("sum", 0.0)
            mine["counts"] = [
                a + b for a, b in zip(mine["counts"], hist.get("counts", []), strict=True)
            ]
    return total


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def questions(user: int, turns: int) -> list[str]:
    first = PROMPTS[user % len(PROMPTS)]
    rng = random.Random(user)
    return [first, *rng.sample(FOLLOW_UPS, turns - 1)]


# --- qassist ----------------------------------------------------------------------------------


def make_accounts(env: dict[str, str], tenants: dict[str, tuple[int, str]]) -> dict[str, list[str]]:
    """Session cookies of `n` users in each tenant (slug -> (n, system prompt))."""
    script = (
        "import json, sys\n"
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from tenants.models import Membership, Tenant\n"
        "spec = json.loads(sys.stdin.read())\n"
        "out = {}\n"
        "for slug, (n, prompt) in spec.items():\n"
        "    t, _ = Tenant.objects.get_or_create(slug=slug, defaults={'name': slug})\n"
        "    t.system_prompt = prompt\n"
        "    t.save()\n"
        "    out[slug] = []\n"
        "    for i in range(n):\n"
        "        u, _ = User.objects.get_or_create(username=f'{slug}-{i}')\n"
        "        Membership.objects.get_or_create(user=u, tenant=t)\n"
        "        c = Client()\n"
        "        c.force_login(u)\n"
        "        out[slug].append(c.cookies['sessionid'].value)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", script],
        input=json.dumps(tenants),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"making the bench accounts failed:\n{done.stderr}")
    result: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def ws_conversation(
    url: str,
    origin: str,
    cookie: str,
    user: int,
    messages: list[str],
    think: bool = True,
    stamps: list[float] | None = None,
) -> list[Turn]:
    rng = random.Random(1000 + user)
    turns: list[Turn] = []
    session = None
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(
        url,
        origin=origin,  # type: ignore[arg-type]
        additional_headers=headers,
        max_size=None,
    ) as ws:
        for i, content in enumerate(messages):
            sent = time.perf_counter()
            first = None
            code = ""
            queued: list[tuple[float, float | None]] = []
            await ws.send(json.dumps({"type": "chat.send", "session": session, "content": content}))
            while True:
                frame = json.loads(await ws.recv())
                kind = frame["type"]
                if kind == "reply.start":
                    session = frame["session"]["id"]
                elif kind == "queued":
                    queued.append((time.perf_counter() - sent, frame.get("estimated_wait")))
                elif kind == "error" and "reply_id" in frame:
                    code = frame.get("code", "")
                elif kind == "delta":
                    now = time.perf_counter()
                    first = first or now
                    if stamps is not None:
                        stamps.append(now)
                elif kind == "error" and "reply_id" not in frame:
                    turns.append(Turn(user, i, 0, 0, 0, sent, sent, frame["message"]))
                    return turns
                elif kind == "reply.done":
                    end = time.perf_counter()
                    reply = frame["reply"]
                    error = reply["error"] if reply["status"] == "error" else ""
                    turns.append(
                        Turn(
                            user,
                            i,
                            reply["completion_tokens"],
                            (first or end) - sent,
                            end - sent,
                            sent,
                            first or end,
                            error,
                            code,
                            queued,
                        )
                    )
                    break
            if think:
                await asyncio.sleep(rng.uniform(*THINK))
    return turns


# The turns, fairness and long-prompt scenarios: always 16 sequences, the speed floor off.
SIXTEEN_SEQUENCES = {"QASSIST_PARALLEL": "16", "QASSIST_MIN_STREAM_SPEED": "0"}


class Qassist:
    def __init__(self, model: Path, args: argparse.Namespace, workdir: Path, **overrides: str):
        self.args = args
        env = qassist_env(workdir, model, args)
        env.update(
            {
                "QASSIST_PARALLEL": str(args.parallel),
                "QASSIST_CONTEXT_SIZE": str(args.context_size),
                "QASSIST_MIN_STREAM_SPEED": str(args.min_stream_speed),
                "QASSIST_HOST_CACHE_MB": str(args.host_cache_mb),
                "QASSIST_MAX_SEQ_TOKENS": "4096",
                "QASSIST_MAX_WAIT_SECONDS": str(args.max_wait),
                "QASSIST_USER_MAX_STREAMS": "4",
                # The machine is shared: a step slowed by other processes is not a dead worker.
                "QASSIST_WORKER_HEARTBEAT_SECONDS": "30",
            }
        )
        env.update(overrides)
        self.env = env
        self.workdir = workdir
        subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)

    def run(self, scenario: Any, *, workers: int = 1, pinned: bool = False) -> Any:
        """`scenario(self, base, ws_url)` against daphne and `workers` inference workers on the
        shared Redis queue; `pinned`: worker i runs on core i alone (`taskset`, one thread)."""
        env, logs = self.env, self.args.logs
        port = free_port()
        base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                  "qassist.asgi:application"]  # fmt: skip
        with ExitStack() as stack:
            for i in range(workers):
                worker = [PYTHON, "manage.py", "run_inference_worker", "--worker-id", f"w{i + 1}"]
                worker_env = env
                if pinned:
                    worker = ["taskset", "-c", str(i), *worker]
                    worker_env = {**env, "QASSIST_THREADS": "1"}
                stack.enter_context(process(worker, worker_env, logs / f"worker{i + 1}.log"))
            web = stack.enter_context(process(daphne, env, logs / "web.log"))
            wait_http(f"{base}/healthz", 180, web, logs / "web.log")
            deadline = time.monotonic() + 180
            while len(all_worker_stats(base)) < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{workers} workers did not all report; see {logs}")
                time.sleep(0.5)
            return scenario(self, base, ws_url)


def policy_env(policy: str, args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The worker's settings for a speed-floor policy, and its name in the tables."""
    floor = f"floor {args.min_stream_speed:g}"
    if policy == "old":
        return f"qassist old ({floor}, no yield)", {"QASSIST_TTFT_TARGET_SECONDS": "0"}
    if policy == "new":
        name = (
            f"qassist new ({floor}, yields to {args.hard_min_stream_speed:g} "
            f"past {args.ttft_target:g} s)"
        )
        return name, {
            "QASSIST_TTFT_TARGET_SECONDS": str(args.ttft_target),
            "QASSIST_MIN_STREAM_SPEED_HARD": str(args.hard_min_stream_speed),
        }
    raise SystemExit(f"unknown policy {policy!r}: old or new")


def qassist_company(model: Path, args: argparse.Namespace, users_list: list[int]) -> list[Run]:
    runs: list[Run] = []
    for policy in args.policies.split(","):
        name, overrides = policy_env(policy.strip(), args)
        # A worker of its own for each policy, one after the other in this run.
        with tempfile.TemporaryDirectory(prefix="qassist-company-") as tmp:
            q = Qassist(model, args, Path(tmp), **overrides)
            most = max(users_list)
            cookies = make_accounts(q.env, {"acme": (most, COMPANY_SYSTEM_PROMPT)})["acme"]

            def scenario(
                q: Qassist, base: str, ws_url: str, cookies: list[str] = cookies, name: str = name
            ) -> None:
                asyncio.run(ws_conversation(ws_url, base, cookies[0], 0, ["Say OK."], think=False))
                for users in users_list:
                    runs.append(
                        run_users(
                            name,
                            users,
                            args.turns,
                            lambda u, msgs: ws_conversation(
                                ws_url, base, cookies[u], u, msgs, think=args.think
                            ),
                            base,
                        )
                    )

            q.run(scenario)
    return runs


def qassist_scale_out(model: Path, args: argparse.Namespace, users_list: list[int]) -> list[Run]:
    """The company workload on one worker pinned to one core, then on two workers pinned to
    one core each, on the same shared queue (issue #24): what a second worker buys."""
    runs: list[Run] = []
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(prefix="qassist-scale-") as tmp:
            q = Qassist(model, args, Path(tmp))
            cookies = make_accounts(q.env, {"acme": (max(users_list), COMPANY_SYSTEM_PROMPT)})[
                "acme"
            ]
            name = f"qassist, {workers} worker{'s' if workers > 1 else ''} x 1 core"

            def scenario(
                q: Qassist,
                base: str,
                ws_url: str,
                name: str = name,
                cookies: list[str] = cookies,
                workers: int = workers,
            ) -> None:
                for i in range(workers):  # each worker's first steps measure its step line
                    asyncio.run(
                        ws_conversation(ws_url, base, cookies[i], i, ["Say OK."], think=False)
                    )
                for users in users_list:
                    runs.append(
                        run_users(
                            name,
                            users,
                            args.turns,
                            lambda u, msgs: ws_conversation(ws_url, base, cookies[u], u, msgs),
                            base,
                        )
                    )

            q.run(scenario, workers=workers, pinned=True)
    return runs


def scale_out_table(runs: list[Run]) -> str:
    lines = [
        "| system | users | tokens/s | x one worker | TTFT p50 | TTFT p95 | follow-ups warm "
        "| replies / tokens per worker |",
        "|---|---|---|---|---|---|---|---|",
    ]
    one = {r.users: r.tps for r in runs if r.system.startswith("qassist, 1 ")}
    for r in sorted(runs, key=lambda r: (r.users, r.system)):
        warm = f"{r.worker.get('follow_ups_warm', 0)}/{r.worker.get('follow_ups', 0)}"
        split = ", ".join(f"{w}: {n} / {t}" for w, (n, t) in r.split.items()) or "—"
        ratio = r.tps / one[r.users] if one.get(r.users) else float("nan")
        lines.append(
            f"| {r.system} | {r.users} | {r.tps:.1f} | {ratio:.2f}x | {r.ttft(0.5):.2f} s | "
            f"{r.ttft(0.95):.2f} s | {warm} | {split} |"
        )
    return "\n".join(lines)


def run_users(system: str, users: int, turns: int, make, base: str | None = None) -> Run:
    run = Run(system, users)
    before_each = {w["id"]: w for w in all_worker_stats(base)} if base else {}
    before = summed(list(before_each.values()))
    start_load = loadavg()

    async def all_users() -> list[list[Turn]]:
        return list(await asyncio.gather(*(make(u, questions(u, turns)) for u in range(users))))

    started = time.perf_counter()
    results = asyncio.run(all_users())
    run.wall = time.perf_counter() - started
    run.turns = [t for r in results for t in r]
    run.load = (start_load, loadavg())
    if base:
        after_each = {w["id"]: w for w in all_worker_stats(base)}
        after = summed(list(after_each.values()))
        if len(after_each) > 1:
            # How the shared queue's work split between the workers: replies finished and
            # tokens generated by each during this run.
            run.split = {
                wid: (
                    finished(w) - finished(before_each.get(wid, {})),
                    int(w.get("generated_tokens", 0))
                    - int(before_each.get(wid, {}).get("generated_tokens", 0)),
                )
                for wid, w in sorted(after_each.items())
            }
        run.worker = {
            k: after.get(k, 0) - before.get(k, 0)
            for k in ("follow_ups", "follow_ups_warm", "restored_tokens", "reused_tokens",
                      "prefill_tokens", "generated_tokens", "steps", "kv_compactions",
                      "floor_yields")
        }  # fmt: skip
        # Where the worker's time went: inside llama_decode, in its steps, and in all.
        for k in ("decode_seconds", "step_seconds", "floor_yielded_seconds"):
            run.worker[k] = round(after.get(k, 0.0) - before.get(k, 0.0), 1)
        run.worker["wall_seconds"] = round(run.wall, 1)
        errors = after.get("errors", {})
        run.worker["errors"] = errors
        # The worker's own mean time to first token (from the request reaching the shared
        # queue), against the clients' mean: the difference is the web's part and delivery.
        hist = [(s.get("histograms") or {}).get("ttft_seconds") or {} for s in (before, after)]
        count = sum(hist[1].get("counts", [])) - sum(hist[0].get("counts", []))
        if count:
            mean = (hist[1].get("sum", 0.0) - hist[0].get("sum", 0.0)) / count
            run.worker["worker_ttft_mean"] = round(mean, 3)
            run.worker["client_ttft_mean"] = round(statistics.mean(t.ttft for t in run.ok), 3)
    print_run(run)
    return run


# --- llama-server -----------------------------------------------------------------------------


async def http_conversation(
    url: str,
    user: int,
    messages: list[str],
    max_tokens: int,
    *,
    system: str = COMPANY_SYSTEM_PROMPT,
) -> list[Turn]:
    """One user's turns over an OpenAI-compatible streaming endpoint (llama-server), with the
    think times qassist's user `user` has (the same seed)."""
    rng = random.Random(1000 + user)
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    turns: list[Turn] = []
    for i, content in enumerate(messages):
        history.append({"role": "user", "content": content})
        async with httpx.AsyncClient(timeout=900) as client:
            sent = time.perf_counter()
            first = None
            tokens = 0
            text = ""
            body = {
                "messages": history,
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "cache_prompt": True,  # llama-server's default, said explicitly
            }
            async with client.stream("POST", url, json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
                    choices = chunk.get("choices") or []
                    piece = choices[0].get("delta", {}).get("content") if choices else None
                    if piece:
                        text += piece
                        if first is None:
                            first = time.perf_counter()
            end = time.perf_counter()
        history.append({"role": "assistant", "content": text})
        turns.append(Turn(user, i, tokens, (first or end) - sent, end - sent, sent, first or end))
        await asyncio.sleep(rng.uniform(*THINK))
    return turns


def server_company(
    binary: Path, model: Path, args: argparse.Namespace, users: int, slots: int
) -> Run:
    port = free_port()
    cmd = [
        str(binary), "-m", str(model), "--port", str(port), "--host", "127.0.0.1",
        "-np", str(slots), "-c", str(slots * 2048), "-t", str(args.threads),
        "-tb", str(args.threads), "--kv-unified", "--no-webui",
    ]  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    log = args.logs / f"llama-server-{slots}.log"
    with process(cmd, env, log) as server:
        wait_http(f"http://127.0.0.1:{port}/health", 180, server, log)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        asyncio.run(http_conversation(url, 0, ["Say OK."], 8))
        return run_users(
            f"llama-server -np {slots} --kv-unified",
            users,
            args.turns,
            lambda u, msgs: http_conversation(url, u, msgs, args.max_tokens),
        )


# --- turns: host cache on and off -------------------------------------------------------------


def qassist_turns(model: Path, args: argparse.Namespace) -> list[Run]:
    runs = []
    for cache_mb in (args.host_cache_mb, 0):
        with tempfile.TemporaryDirectory(prefix="qassist-turns-") as tmp:
            q = Qassist(
                model,
                args,
                Path(tmp),
                **SIXTEEN_SEQUENCES,
                QASSIST_HOST_CACHE_MB=str(cache_mb),
            )
            cookies = make_accounts(q.env, {"acme": (32, COMPANY_SYSTEM_PROMPT)})["acme"]

            def scenario(
                q: Qassist, base: str, ws_url: str, cookies: list[str] = cookies, mb: int = cache_mb
            ) -> Run:
                asyncio.run(ws_conversation(ws_url, base, cookies[0], 0, ["Say OK."], think=False))
                return run_users(
                    f"qassist, 16 sequences, host cache {mb} MB",
                    32,
                    6,
                    lambda u, msgs: ws_conversation(ws_url, base, cookies[u], u, msgs),
                    base,
                )

            runs.append(q.run(scenario))
    return runs


# --- fairness ----------------------------------------------------------------------------------

SAME_STEP = 0.02  # first tokens this close together came from one engine step


def qassist_fairness(model: Path, args: argparse.Namespace) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory(prefix="qassist-fair-") as tmp:
        q = Qassist(
            model,
            args,
            Path(tmp),
            **SIXTEEN_SEQUENCES,
            # The start order is fair share's alone: aging (oldest first) must not kick in.
            QASSIST_QUEUE_AGING_SECONDS="300",
        )
        cookies = make_accounts(q.env, {"tenant-a": (40, ""), "tenant-b": (4, "")})

        def scenario(q: Qassist, base: str, ws_url: str) -> list[tuple[str, float]]:
            a, b = cookies["tenant-a"], cookies["tenant-b"]
            asyncio.run(ws_conversation(ws_url, base, a[0], 0, ["Say OK."], think=False))

            async def fire() -> list[tuple[str, float]]:
                prompt = [PROMPTS[0]]
                tasks = [
                    asyncio.create_task(ws_conversation(ws_url, base, a[i], i, prompt, False))
                    for i in range(40)
                ]
                await asyncio.sleep(0.5)  # A's burst is queued first
                tasks += [
                    asyncio.create_task(ws_conversation(ws_url, base, b[i], 100 + i, prompt, False))
                    for i in range(4)
                ]
                done = await asyncio.gather(*tasks)
                starts = [
                    ("A" if t.user < 100 else "B", t.first_at) for turns in done for t in turns
                ]
                return sorted(starts, key=lambda s: s[1])

            return asyncio.run(fire())

        result: list[tuple[str, float]] = q.run(scenario)
        return result


# --- long prompt: running streams while a 2,000-token prompt is prefilled ----------------------

LONG_REPLY = "Write a detailed, step by step guide to onboarding a new warehouse employee."


def qassist_long_prompt(model: Path, args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="qassist-long-") as tmp:
        q = Qassist(
            model,
            args,
            Path(tmp),
            **SIXTEEN_SEQUENCES,
            QASSIST_DEFAULT_MAX_TOKENS="200",
        )
        cookies = make_accounts(q.env, {"acme": (9, "")})["acme"]
        long_text = (COMPANY_SYSTEM_PROMPT + "\n\n") * 6 + "Summarise the text above in one line."

        def scenario(q: Qassist, base: str, ws_url: str) -> str:
            asyncio.run(ws_conversation(ws_url, base, cookies[0], 0, ["Say OK."], think=False))

            async def phase(with_long: bool) -> tuple[list[float], Turn | None, float]:
                stamps: list[list[float]] = [[] for _ in range(8)]
                tasks = [
                    asyncio.create_task(
                        ws_conversation(ws_url, base, cookies[i], i, [LONG_REPLY], False, stamps[i])
                    )
                    for i in range(8)
                ]
                await asyncio.sleep(4.0)  # the eight streams are decoding
                started = time.perf_counter()
                long_turn = None
                if with_long:
                    [long_turn] = await ws_conversation(
                        ws_url, base, cookies[8], 8, [long_text], False
                    )
                    window = (long_turn.sent_at, long_turn.first_at)
                else:
                    await asyncio.sleep(8.0)
                    window = (started, time.perf_counter())
                await asyncio.gather(*tasks)
                gaps = [
                    b - a
                    for s in stamps
                    for a, b in itertools.pairwise(s)
                    if window[0] <= b <= window[1]
                ]
                return sorted(gaps), long_turn, window[1] - window[0]

            def p(values: list[float], q: float) -> float:
                if not values:
                    return float("nan")
                return values[min(len(values) - 1, round(q * (len(values) - 1)))]

            base_gaps, _, base_window = asyncio.run(phase(False))
            load_gaps, long_turn, window = asyncio.run(phase(True))
            assert long_turn is not None
            return (
                "| | inter-token p50 | p99 | gaps measured | window |\n|---|---|---|---|---|\n"
                f"| 8 streams alone | {p(base_gaps, 0.5) * 1000:.0f} ms | "
                f"{p(base_gaps, 0.99) * 1000:.0f} ms | {len(base_gaps)} | {base_window:.1f} s |\n"
                f"| 8 streams while a 2,000-token prompt is prefilled | "
                f"{p(load_gaps, 0.5) * 1000:.0f} ms | {p(load_gaps, 0.99) * 1000:.0f} ms | "
                f"{len(load_gaps)} | {window:.1f} s |\n\n"
                f"The long prompt's TTFT: {long_turn.ttft:.2f} s "
                f"(error: {long_turn.error or 'none'}); p99 ratio "
                f"{p(load_gaps, 0.99) / p(base_gaps, 0.99):.2f}; load {loadavg()}"
            )

        result: str = q.run(scenario)
        return result


# --- report ------------------------------------------------------------------------------------


def print_run(r: Run) -> None:
    speeds = r.stream_speeds()
    turns = sorted({t.turn for t in r.ok})
    per_turn = " ".join(f"t{t + 1} {r.ttft(0.5, t):.2f}" for t in turns)
    queued, estimated, off = r.estimates()
    print(
        f"{r.system:40s} users={r.users:<3d} {r.tps:6.1f} tok/s  TTFT p50 {r.ttft(0.5):5.2f} "
        f"p95 {r.ttft(0.95):5.2f} s  per-turn p50 [{per_turn}]  stream median "
        f"{statistics.median(speeds) if speeds else 0:.1f} min {min(speeds) if speeds else 0:.1f} "
        f"tok/s  errors {len(r.turns) - len(r.ok)} (busy {r.busy})  queued {queued} "
        f"(estimated {estimated}, estimate error p50 {off:+.1f} s)  load {r.load[0]}->{r.load[1]}  "
        f"{json.dumps(r.worker) if r.worker else ''}",
        flush=True,
    )
    for error in sorted({t.error for t in r.turns if t.error})[:5]:
        print(f"  error: {error}", flush=True)


def markdown(runs: list[Run]) -> str:
    lines = [
        "| system | users | tokens/s | TTFT p50 | TTFT p95 | TTFT p50 by turn | per-stream "
        "tok/s (min / median of users' medians) | follow-ups warm | errors (busy) | floor "
        "yielded | waited in line (with an estimate; estimate error p50) | load avg start→end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: r.users):  # each user count's systems side by side
        speeds = r.stream_speeds()
        turns = sorted({t.turn for t in r.ok})
        by_turn = " / ".join(f"{r.ttft(0.5, t):.2f}" for t in turns)
        warm = (
            f"{r.worker['follow_ups_warm']}/{r.worker['follow_ups']}"
            if r.worker.get("follow_ups")
            else "—"
        )
        yielded = (
            f"{r.worker['floor_yields']} times, {r.worker.get('floor_yielded_seconds', 0):g} s"
            if "floor_yields" in r.worker
            else "—"
        )
        queued, estimated, error = r.estimates()
        waits = f"{queued} ({estimated}; {error:+.1f} s)" if queued else "0"
        lines.append(
            f"| {r.system} | {r.users} | {r.tps:.1f} | {r.ttft(0.5):.2f} s | "
            f"{r.ttft(0.95):.2f} s | {by_turn} | "
            f"{min(speeds) if speeds else 0:.1f} / {statistics.median(speeds) if speeds else 0:.1f}"
            f" | {warm} | {len(r.turns) - len(r.ok)} ({r.busy}) | {yielded} | {waits} | "
            f"{r.load[0]}→{r.load[1]} |"
        )
    return "\n".join(lines)


def main() -> None:
    from inference import modelstore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--scenario",
        choices=["company", "turns", "fairness", "long", "scale-out"],
        default="company",
    )
    parser.add_argument("--users", default="16,32,50")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=48)
    parser.add_argument("--context-size", type=int, default=65536)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument("--min-stream-speed", type=float, default=5.0)
    parser.add_argument(
        "--policies",
        default="new",
        help="speed-floor policies to run, each with its own worker: old (the floor never "
        "yields), new (yields to the first-token target), or old,new",
    )
    parser.add_argument(
        "--ttft-target", type=float, default=2.0, help="seconds before the new policy yields"
    )
    parser.add_argument(
        "--hard-min-stream-speed", type=float, default=2.5, help="tokens/s the new one yields to"
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=None,
        help="QASSIST_MAX_WAIT_SECONDS: replies waiting longer are refused busy; by default "
        "the product's 90 s for the company scenario (runs before 2026-12-01 used 600), 600 "
        "for the others (where everyone waits for 16 sequences on purpose)",
    )
    parser.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="company: a think time of 0.5-2 s between a reply and the next message; "
        "--no-think sends the follow-up the instant reply.done arrives (review #21, finding 12)",
    )
    parser.add_argument("--host-cache-mb", type=int, default=1024)
    parser.add_argument("--server-np", default="matched", help="llama-server -np: matched,16")
    parser.add_argument(
        "--server-users",
        default="",
        help="user counts llama-server is run at (default: every one of --users)",
    )
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--logs", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-logs-")))
    args = parser.parse_args()
    args.requests_per_client = 1
    if args.max_wait is None:
        args.max_wait = 90.0 if args.scenario == "company" else 600.0
    args.concurrency = []
    model = modelstore.resolve_model_path(args.model, ROOT / "models")
    print(f"model {model.name}; logs in {args.logs}", flush=True)

    if args.scenario == "fairness":
        order = qassist_fairness(model, args)
        # Replies whose first tokens came from the same engine step start together: a group
        # in brackets, A's before B's within it (the least favourable reading for B).
        groups: list[list[str]] = []
        last = None
        for who, at in order:
            if last is None or at - last > SAME_STEP:
                groups.append([])
            groups[-1].append(who)
            last = at
        print(
            "start order: "
            + "".join(f"[{''.join(sorted(g))}]" if len(g) > 1 else g[0] for g in groups)
        )
        print(" ".join(f"{who}{at - order[0][1]:.2f}" for who, at in order))
        before = [
            sum(w == "A" and at < t - SAME_STEP for w, at in order)
            for who, t in order
            if who == "B"
        ]
        a_total = sum(w == "A" for w, _ in order)
        print(
            f"A's started before each of B's: {before} of {a_total} (target: under {a_total // 2})"
        )
        return
    if args.scenario == "long":
        print(qassist_long_prompt(model, args))
        return
    if args.scenario == "turns":
        print(markdown(qassist_turns(model, args)))
        return

    users_list = [int(u) for u in args.users.split(",")]
    if args.scenario == "scale-out":
        print(scale_out_table(qassist_scale_out(model, args, users_list)))
        return
    runs = qassist_company(model, args, users_list)
    if not args.skip_server:
        binary = args.llama_server or Path(
            subprocess.run(
                ["bash", str(ROOT / "bench" / "build_llama_server.sh")],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        server_users = [int(u) for u in args.server_users.split(",")] if args.server_users else []
        for users in server_users or users_list:
            for np in args.server_np.split(","):
                slots = users if np == "matched" else int(np)
                if np != "matched" and slots == users:
                    continue
                runs.append(server_company(binary, model, args, users, slots))
    print(markdown(runs))


if __name__ == "__main__":
    main()
