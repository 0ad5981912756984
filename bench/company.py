"""Company-shaped workloads (issue #9): conversations, more users than sequences, fair shares.

    python -m bench.company --model qwen2.5-coder-0.5b --scenario company --users 16,32,50
    python -m bench.company --scenario turns          # 32 conversations x 6 turns, 16 sequences,
                                                      # host cache on, then off
    python -m bench.company --scenario fairness       # tenant A sends 40, then tenant B 4
    python -m bench.company --scenario long           # 8 streams, then a 2,000-token prompt

- **company**: U employees of one tenant whose system prompt is about 350 tokens, each holding
  a conversation of `--turns` turns with a think time of 0.5-2 s (seeded) between a reply and
  the next message. qassist (daphne + websocket consumer + Redis + worker, one user account
  per employee) against llama.cpp's `llama-server` on the same workload over its OpenAI API
  (the whole history sent each turn, as OpenAI clients do), with `-np` matched to the users and
  the unified KV cache (`--kv-unified`), and `-np 16` too with `--server-np`.
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
    worker_stats,
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

    def stream_speeds(self) -> list[float]:
        """Each stream's speed: the median over a user's replies, one value per user."""
        per_user: dict[int, list[float]] = {}
        for t in self.ok:
            if t.stream_tps > 0:
                per_user.setdefault(t.user, []).append(t.stream_tps)
        return sorted(statistics.median(v) for v in per_user.values())


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
            await ws.send(json.dumps({"type": "chat.send", "session": session, "content": content}))
            while True:
                frame = json.loads(await ws.recv())
                kind = frame["type"]
                if kind == "reply.start":
                    session = frame["session"]["id"]
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
                "QASSIST_MAX_WAIT_SECONDS": "600",
                "QASSIST_USER_MAX_STREAMS": "4",
                # The machine is shared: a step slowed by other processes is not a dead worker.
                "QASSIST_WORKER_HEARTBEAT_SECONDS": "30",
            }
        )
        env.update(overrides)
        self.env = env
        self.workdir = workdir
        subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)

    def run(self, scenario: Any) -> Any:
        env, logs = self.env, self.args.logs
        port = free_port()
        base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                  "qassist.asgi:application"]  # fmt: skip
        worker = [PYTHON, "manage.py", "run_inference_worker"]
        with (
            process(worker, env, logs / "worker.log"),
            process(daphne, env, logs / "web.log") as web,
        ):
            wait_http(f"{base}/healthz", 180, web, logs / "web.log")
            return scenario(self, base, ws_url)


def qassist_company(model: Path, args: argparse.Namespace, users_list: list[int]) -> list[Run]:
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="qassist-company-") as tmp:
        q = Qassist(model, args, Path(tmp))
        most = max(users_list)
        cookies = make_accounts(q.env, {"acme": (most, COMPANY_SYSTEM_PROMPT)})["acme"]

        def scenario(q: Qassist, base: str, ws_url: str) -> None:
            asyncio.run(ws_conversation(ws_url, base, cookies[0], 0, ["Say OK."], think=False))
            for users in users_list:
                runs.append(
                    run_users(
                        "qassist",
                        users,
                        args.turns,
                        lambda u, msgs: ws_conversation(ws_url, base, cookies[u], u, msgs),
                        base,
                    )
                )

        q.run(scenario)
    return runs


def run_users(system: str, users: int, turns: int, make, base: str | None = None) -> Run:
    run = Run(system, users)
    before = worker_stats(base) if base else {}
    start_load = loadavg()

    async def all_users() -> list[list[Turn]]:
        return list(await asyncio.gather(*(make(u, questions(u, turns)) for u in range(users))))

    started = time.perf_counter()
    results = asyncio.run(all_users())
    run.wall = time.perf_counter() - started
    run.turns = [t for r in results for t in r]
    run.load = (start_load, loadavg())
    if base:
        after = worker_stats(base)
        run.worker = {
            k: after.get(k, 0) - before.get(k, 0)
            for k in ("follow_ups", "follow_ups_warm", "restored_tokens", "reused_tokens",
                      "prefill_tokens", "generated_tokens", "steps", "kv_compactions")
        }  # fmt: skip
        # Where the worker's time went: inside llama_decode, in its steps, and in all.
        for k in ("decode_seconds", "step_seconds"):
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
    url: str, user: int, messages: list[str], max_tokens: int
) -> list[Turn]:
    rng = random.Random(1000 + user)
    history: list[dict[str, str]] = [{"role": "system", "content": COMPANY_SYSTEM_PROMPT}]
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
    print(
        f"{r.system:40s} users={r.users:<3d} {r.tps:6.1f} tok/s  TTFT p50 {r.ttft(0.5):5.2f} "
        f"p95 {r.ttft(0.95):5.2f} s  per-turn p50 [{per_turn}]  stream median "
        f"{statistics.median(speeds) if speeds else 0:.1f} min {min(speeds) if speeds else 0:.1f} "
        f"tok/s  errors {len(r.turns) - len(r.ok)}  load {r.load[0]}->{r.load[1]}  "
        f"{json.dumps(r.worker) if r.worker else ''}",
        flush=True,
    )
    for error in sorted({t.error for t in r.turns if t.error})[:5]:
        print(f"  error: {error}", flush=True)


def markdown(runs: list[Run]) -> str:
    lines = [
        "| system | users | tokens/s | TTFT p50 | TTFT p95 | TTFT p50 by turn | per-stream "
        "tok/s (min / median of users' medians) | follow-ups warm | errors | load avg start→end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        speeds = r.stream_speeds()
        turns = sorted({t.turn for t in r.ok})
        by_turn = " / ".join(f"{r.ttft(0.5, t):.2f}" for t in turns)
        warm = (
            f"{r.worker['follow_ups_warm']}/{r.worker['follow_ups']}"
            if r.worker.get("follow_ups")
            else "—"
        )
        lines.append(
            f"| {r.system} | {r.users} | {r.tps:.1f} | {r.ttft(0.5):.2f} s | "
            f"{r.ttft(0.95):.2f} s | {by_turn} | "
            f"{min(speeds) if speeds else 0:.1f} / {statistics.median(speeds) if speeds else 0:.1f}"
            f" | {warm} | {len(r.turns) - len(r.ok)} | {r.load[0]}→{r.load[1]} |"
        )
    return "\n".join(lines)


def main() -> None:
    from inference import modelstore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--scenario", choices=["company", "turns", "fairness", "long"], default="company"
    )
    parser.add_argument("--users", default="16,32,50")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=48)
    parser.add_argument("--context-size", type=int, default=65536)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument("--min-stream-speed", type=float, default=5.0)
    parser.add_argument("--host-cache-mb", type=int, default=1024)
    parser.add_argument("--server-np", default="matched", help="llama-server -np: matched,16")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--logs", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-logs-")))
    args = parser.parse_args()
    args.requests_per_client = 1
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
        for users in users_list:
            for np in args.server_np.split(","):
                slots = users if np == "matched" else int(np)
                if np != "matched" and slots == users:
                    continue
                runs.append(server_company(binary, model, args, users, slots))
    print(markdown(runs))


if __name__ == "__main__":
    main()
