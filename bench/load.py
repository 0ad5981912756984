"""Load and soak: simulated employees and integrations against a live qassist, for a set time.

    python -m bench.load [--model smollm2-135m] [--users 50] [--duration 120] [--rest-share 0.5]
                         [--think 1,6] [--redis redis://127.0.0.1:6379/13] [--max-queue 16]

Starts qassist from scratch (a temporary SQLite database or an empty --database-url, a temporary
var folder; with --redis a web process and an inference worker on that Redis, without it the
embedded mode) and drives
`--users` users, each in a closed loop with think time: a share of them chat over the websocket
(logged-in members, follow-up turns in the same conversation), the rest call the REST API with
their tenant's key, streaming. Two tenants: `open` without limits and `tight` with a low
requests-per-minute and concurrent-streams limit, so refusals happen on purpose; the engine's
queue is kept short (`--max-queue`) so that, over capacity, requests are answered "busy".

Reported: requests and outcomes by surface, TTFT p50/p95, tokens/s, errors by kind, refusals
and how fast they came, and the RSS of the web and worker processes at start and end (a soak is
the same run with a long --duration). Then every request is checked against the database:
none may hang (each has a client timeout, counted if hit), none may vanish (every reply the
clients saw start has exactly one terminal state, none is left `streaming`; every refusal the
clients saw is a `rejected` usage record).

Why not locust: its users are gevent greenlets, which need a synchronous websocket client and
measure whole requests, not the time to a stream's first token; this driver uses the same
asyncio clients as bench/run.py, and checks the database itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.prompts import PROMPTS
from bench.run import PYTHON, ROOT, cpu_seconds, free_port, process, wait_http

REQUEST_TIMEOUT = 300.0
FOLLOW_UPS = ["Can you say more?", "Give an example.", "Summarise that in one sentence."]


@dataclass
class Outcome:
    surface: str  # ws or rest
    tenant: str
    started: float
    ttft: float | None = None
    duration: float = 0.0
    tokens: int = 0
    result: str = "ok"  # ok | refused:<code> | error:<code> | hung
    reply_id: str = ""


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    loop_lag: list[float] = field(default_factory=list)  # the driver's own event loop
    cpu: dict[str, float] = field(default_factory=dict)  # process -> cores used on average


async def sample_loop_lag(deadline: float, run: Run) -> None:
    """How late this driver's event loop wakes up: every client's timestamps wait for it, so a
    refusal measured at 1 s with a loop 0.8 s late was the driver's, not the server's."""
    while time.monotonic() < deadline:
        before = time.monotonic()
        await asyncio.sleep(0.02)
        run.loop_lag.append(time.monotonic() - before - 0.02)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def seed(env: dict[str, str], ws_users: int, rest_users: int) -> dict[str, Any]:
    """Two tenants, members with logged-in sessions, a key per tenant."""
    script = f"""
import json
from django.contrib.auth.models import User
from django.test import Client
from tenants.models import Membership
from tenants.services import api_key_create, tenant_create
open_t = tenant_create(slug="open", system_prompt="You are Acme's helpful assistant. " * 20)
tight = tenant_create(slug="tight", requests_per_minute=20, max_concurrent_streams=3)
cookies, keys = [], {{}}
for i in range({ws_users}):
    tenant = tight if i % 5 == 4 else open_t
    user = User.objects.create_user(f"load{{i}}")
    Membership.objects.create(user=user, tenant=tenant)
    c = Client()
    c.force_login(user)
    cookies.append([tenant.slug, c.cookies["sessionid"].value])
for tenant in (open_t, tight):
    keys[tenant.slug] = api_key_create(tenant=tenant, name="load")[1]
print(json.dumps({{"cookies": cookies, "keys": keys}}))
"""
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-v", "0", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def ws_user(
    url: str, origin: str, tenant: str, cookie: str, deadline: float, args: Any, run: Run
) -> None:
    rng = random.Random(cookie)
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:  # type: ignore[arg-type]
        session = None
        while time.monotonic() < deadline:
            content = rng.choice(PROMPTS) if session is None else rng.choice(FOLLOW_UPS)
            outcome = Outcome("ws", tenant, time.monotonic())
            await ws.send(json.dumps({"type": "chat.send", "session": session, "content": content}))
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    while True:
                        frame = json.loads(await ws.recv())
                        now = time.monotonic()
                        if frame["type"] == "reply.start":
                            outcome.reply_id = str(frame["reply"]["id"])
                            session = frame["session"]["id"]
                        elif frame["type"] == "delta" and outcome.ttft is None:
                            outcome.ttft = now - outcome.started
                        elif frame["type"] == "error" and "reply_id" not in frame:
                            outcome.result = f"refused:{frame['code']}"
                            break
                        elif frame["type"] == "error":
                            # "busy": the engine's queue was full, the stored reply ends at once.
                            kind = "refused" if frame["code"] == "busy" else "error"
                            outcome.result = f"{kind}:{frame['code']}"
                        elif frame["type"] == "reply.done":
                            outcome.tokens = frame["reply"]["completion_tokens"]
                            break
            except TimeoutError:
                outcome.result = "hung"
            outcome.duration = time.monotonic() - outcome.started
            run.outcomes.append(outcome)
            if outcome.result == "ok" and rng.random() < 0.3:
                session = None  # a new conversation now and then
            await asyncio.sleep(rng.uniform(*args.think))


async def rest_user(
    client: httpx.AsyncClient,
    base: str,
    tenant: str,
    key: str,
    model: str,
    deadline: float,
    args: Any,
    run: Run,
    n: int,
) -> None:
    rng = random.Random(n)
    headers = {"Authorization": f"Bearer {key}"}
    async with client:
        while time.monotonic() < deadline:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "user": f"rest-{n}",
            }
            outcome = Outcome("rest", tenant, time.monotonic())
            try:
                async with (
                    asyncio.timeout(REQUEST_TIMEOUT),
                    client.stream(
                        "POST", f"{base}/v1/chat/completions", json=body, headers=headers
                    ) as response,
                ):
                    if response.status_code != 200:
                        error = json.loads(await response.aread())["error"]
                        kind = "refused" if response.status_code in (429, 503) else "error"
                        outcome.result = f"{kind}:{error['code']}"
                    else:
                        async for line in response.aiter_lines():
                            if not line.startswith("data: ") or line == "data: [DONE]":
                                continue
                            chunk = json.loads(line[6:])
                            if "error" in chunk:
                                outcome.result = f"error:{chunk['error']['code']}"
                                break
                            outcome.reply_id = chunk["id"]
                            choices = chunk["choices"]
                            content = choices and choices[0]["delta"].get("content")
                            if content and outcome.ttft is None:
                                outcome.ttft = time.monotonic() - outcome.started
                            if chunk.get("usage"):
                                outcome.tokens = chunk["usage"]["completion_tokens"]
            except TimeoutError:
                outcome.result = "hung"
            except httpx.HTTPError as exc:
                outcome.result = f"error:{type(exc).__name__}"
            outcome.duration = time.monotonic() - outcome.started
            run.outcomes.append(outcome)
            await asyncio.sleep(rng.uniform(*args.think))


async def sample_rss(pids: dict[str, int], deadline: float, run: Run) -> None:
    pids = {**pids, "driver": os.getpid()}
    started = time.monotonic()
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    while time.monotonic() < deadline + 5:
        for name, pid in pids.items():
            if name != "driver":
                run.rss.setdefault(name, []).append((time.monotonic(), rss_kib(pid)))
        if time.monotonic() < deadline:
            wall = time.monotonic() - started
            run.cpu = {n: (cpu_seconds(p) - cpu[n]) / wall for n, p in pids.items()}
        await asyncio.sleep(5)


def database_check(env: dict[str, str]) -> dict[str, Any]:
    script = """
import json
from collections import Counter
from chat.models import Message
from tenants.models import UsageRecord
replies = Message.objects.filter(role="assistant")
print(json.dumps({
    "replies": replies.count(),
    "by_status": dict(Counter(replies.values_list("status", flat=True))),
    "rejected": UsageRecord.objects.filter(status="rejected").count(),
    "rejected_by_reason": dict(Counter(UsageRecord.objects.filter(status="rejected")
                                       .values_list("reason", flat=True))),
}))
"""
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-v", "0", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(run: Run, wall: float, db: dict[str, Any]) -> bool:
    outcomes = run.outcomes
    print(f"\n{len(outcomes)} requests in {wall:.0f} s")
    print("\n| surface | requests | ok | TTFT p50 | TTFT p95 | tokens | refused | errors | hung |")
    print("|---|---|---|---|---|---|---|---|---|")
    for surface in ("ws", "rest"):
        mine = [o for o in outcomes if o.surface == surface]
        ok = [o for o in mine if o.result == "ok"]
        ttfts = [o.ttft for o in ok if o.ttft is not None]
        print(
            f"| {surface} | {len(mine)} | {len(ok)} | {pct(ttfts, 0.5):.2f} s | "
            f"{pct(ttfts, 0.95):.2f} s | {sum(o.tokens for o in ok)} | "
            f"{sum(o.result.startswith('refused') for o in mine)} | "
            f"{sum(o.result.startswith('error') for o in mine)} | "
            f"{sum(o.result == 'hung' for o in mine)} |"
        )
    tokens = sum(o.tokens for o in outcomes if o.result == "ok")
    print(f"\naggregate: {tokens / wall:.1f} tokens/s")
    kinds = collections.Counter(o.result for o in outcomes if o.result != "ok")
    print("outcomes other than ok:", dict(kinds) or "none")
    refusals = [o.duration for o in outcomes if o.result.startswith("refused")]
    if refusals:
        print(
            f"refusals answered in: p50 {pct(refusals, 0.5) * 1000:.0f} ms, "
            f"p95 {pct(refusals, 0.95) * 1000:.0f} ms, p99 {pct(refusals, 0.99) * 1000:.0f} ms, "
            f"max {max(refusals) * 1000:.0f} ms; {sum(r >= 1.0 for r in refusals)} of "
            f"{len(refusals)} took a second or more"
        )
        start = min(o.started for o in outcomes)
        slowest = sorted(
            (o for o in outcomes if o.result.startswith("refused")), key=lambda o: -o.duration
        )[:8]
        print(
            "  slowest: "
            + ", ".join(
                f"{o.surface} {o.result.split(':')[1]} {o.duration * 1000:.0f} ms "
                f"at {o.started - start:.0f} s"
                for o in slowest
            )
        )
        for kind in sorted({o.result for o in outcomes if o.result.startswith("refused")}):
            times = [o.duration for o in outcomes if o.result == kind]
            print(
                f"  {kind}: {len(times)}, p50 {pct(times, 0.5) * 1000:.0f} ms, "
                f"p95 {pct(times, 0.95) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
            )
    if run.loop_lag:
        lag = run.loop_lag
        print(
            f"driver event loop lag: p50 {pct(lag, 0.5) * 1000:.0f} ms, "
            f"p99 {pct(lag, 0.99) * 1000:.0f} ms, max {max(lag) * 1000:.0f} ms "
            f"({sum(x >= 0.25 for x in lag)} of {len(lag)} wake-ups late by 250 ms or more)"
        )
    if run.cpu:
        print(
            "CPU, cores used on average (of "
            f"{os.cpu_count()}): "
            + ", ".join(f"{name} {cores:.2f}" for name, cores in run.cpu.items())
        )
    for name, samples in run.rss.items():
        start, end = samples[min(2, len(samples) - 1)][1], samples[-1][1]
        peak = max(kib for _, kib in samples)
        print(
            f"RSS {name}: {start / 1024:.0f} MiB after warm-up, {end / 1024:.0f} MiB at the end, "
            f"peak {peak / 1024:.0f} MiB"
        )

    limit_codes = {"rate_limited", "rate_limit_exceeded", "quota_exceeded", "insufficient_quota"}
    limit_refusals = [o for o in outcomes if o.result.split(":")[-1] in limit_codes]
    # A full queue is refused at admission (a rejected usage record "busy", nothing stored)
    # or, when it filled after that check, by the queue (the reply stored, then ended busy).
    # A websocket client tells the two apart (a reply id or not); a REST client cannot, so
    # the REST ones refused at admission are the records' count less the websocket ones.
    busy_rejected = db["rejected_by_reason"].get("busy", 0)
    ws_busy_at_admission = sum(
        o.surface == "ws" and o.result == "refused:busy" and not o.reply_id for o in outcomes
    )
    rest_busy_at_admission = busy_rejected - ws_busy_at_admission
    # A reply is stored once admission lets a request through: a websocket turn that started,
    # a REST request that was not refused by a limit or at admission.
    stored_rest = [
        o
        for o in outcomes
        if o.surface == "rest" and o not in limit_refusals and not o.result.startswith("error:HTTP")
    ]
    stored = sum(o.surface == "ws" and bool(o.reply_id) for o in outcomes)
    stored += len(stored_rest) - rest_busy_at_admission
    rest_busy = sum(o.surface == "rest" and o.result == "refused:busy" for o in outcomes)
    print(f"\ndatabase: {db}")
    checks = {
        "no request hung": kinds.get("hung", 0) == 0,
        "no reply left streaming": db["by_status"].get("streaming", 0) == 0,
        "every admitted request is stored once": db["replies"] == stored
        and 0 <= rest_busy_at_admission <= rest_busy,
        "every limit refusal is a rejected usage record": db["rejected"] - busy_rejected
        == len(limit_refusals),
        "refusals came within a second": not refusals or max(refusals) < 1.0,
    }
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return all(checks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--rest-share", type=float, default=0.5)
    parser.add_argument("--think", default="1,6", help="seconds between requests: min,max")
    parser.add_argument("--redis", default="", help="Redis mode on this Redis (else embedded)")
    parser.add_argument(
        "--database-url", default="", help="an empty database to use (else a temporary SQLite)"
    )
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    args.think = tuple(float(x) for x in args.think.split(","))
    rest_users = round(args.users * args.rest_share)
    ws_users = args.users - rest_users

    with tempfile.TemporaryDirectory(prefix="qassist-load-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
        env.update(
            DATABASE_URL=args.database_url or f"sqlite:///{workdir / 'load.sqlite3'}",
            QASSIST_VAR_DIR=str(workdir),
            QASSIST_MODEL=args.model,
            QASSIST_MODELS_DIR=str(ROOT / "models"),
            QASSIST_PARALLEL=str(args.parallel),
            QASSIST_CONTEXT_SIZE=str(max(16384, args.parallel * 512)),
            QASSIST_THREADS=str(args.threads),
            QASSIST_MAX_QUEUE=str(args.max_queue),
            QASSIST_DEFAULT_MAX_TOKENS=str(args.max_tokens),
            QASSIST_GENERATE_TITLES="0",
            QASSIST_REDIS_PREFIX=f"load-{uuid.uuid4().hex[:8]}",
            REDIS_URL=args.redis,
            SECRET_KEY=uuid.uuid4().hex * 2,
            ALLOWED_HOSTS="127.0.0.1,localhost",
            LOG_LEVEL="WARNING",
        )
        subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
        seeded = seed(env, ws_users, rest_users)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
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
        pids = {}
        if args.redis:
            worker = stack.enter_context(
                process([PYTHON, "manage.py", "run_inference_worker"], env, workdir / "worker.log")
            )
            pids["worker"] = worker.pid
        web = stack.enter_context(process(daphne, env, workdir / "web.log"))
        pids["web" if args.redis else "web+engine"] = web.pid
        wait_http(f"{base}/healthz", 180, web, workdir / "web.log")
        print(
            f"qassist up ({'redis' if args.redis else 'embedded'} mode, {args.model}); "
            f"{ws_users} websocket users, {rest_users} REST users, {args.duration:.0f} s"
        )

        async def drive() -> tuple[Run, float]:
            run = Run()
            # Made before the clock starts: each takes the driver's loop tens of ms (its TLS
            # context), which at the start delayed the first requests' timestamps by ~0.5 s.
            clients = [httpx.AsyncClient(timeout=REQUEST_TIMEOUT) for _ in range(rest_users)]
            deadline = time.monotonic() + args.duration
            started = time.monotonic()
            ws_url = f"ws://127.0.0.1:{port}/ws/chat/"
            tasks = [sample_rss(pids, deadline, run), sample_loop_lag(deadline, run)]
            for slug, cookie in seeded["cookies"]:
                tasks.append(ws_user(ws_url, base, slug, cookie, deadline, args, run))
            for i in range(rest_users):
                slug = "tight" if i % 5 == 4 else "open"
                key = seeded["keys"][slug]
                tasks.append(
                    rest_user(clients[i], base, slug, key, args.model, deadline, args, run, i)
                )
            await asyncio.gather(*tasks)
            return run, time.monotonic() - started

        run, wall = asyncio.run(drive())
        time.sleep(2)  # the last settlements
        ok = report(run, wall, database_check(env))
        print("\nload run:", "PASS" if ok else "FAIL")
        if not ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
