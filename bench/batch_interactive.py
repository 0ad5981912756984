"""Does a batch slow interactive users down? A websocket user's time to first token while idle,
then while a batch of 20 prompts runs, on the embedded model, in the same run.

    PYTHONPATH=$PWD python bench/batch_interactive.py [--model smollm2-135m] [--batch 20]
        [--max-tokens 64] [--batch-concurrency 2] [--redis redis://127.0.0.1:6379/11]

Starts daphne in the embedded mode (the engine and the batch runner in the web process) on a
scratch SQLite database — or, with --redis, as deployed: the web process, an inference worker
and a Celery worker (the batch runner) as three processes on that Redis — then:
  1. idle: one browser user asks ten short questions one after the other over the websocket;
  2. loaded: the same user asks them again right after a batch of --batch prompts is submitted
     over REST (`POST /v1/batches`), while the batch runs;
and prints TTFT p50 / p95 for both, their ratio, and how long the batch took. The target: the
loaded TTFT within 1.5x of the idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.run import PYTHON, ROOT, free_port, process, wait_http

TEMPLATES = [
    "What is a good name for a {}?",
    "Give me one tip about {}.",
    "Say something short about {}.",
    "Name three facts about {}.",
    "Suggest a short title for a meeting about {}.",
]
TOPICS = [
    "cats",
    "budgets",
    "emails",
    "compilers",
    "rainbows",
    "water",
    "France",
    "trains",
    "gardening",
    "coffee",
    "spreadsheets",
    "holidays",
    "printers",
    "passwords",
    "the moon",
    "bicycles",
    "meetings",
    "invoices",
    "tea",
    "winter",
    "rivers",
    "chess",
    "bread",
    "music",
]


def fresh_questions() -> Any:
    """Questions never asked before in the run: each first question of a new conversation is
    computed from its prompt in both phases, as a real user's would be, instead of the idle
    phase finding a repeated question's whole prompt still kept from the warm-up."""
    for n in itertools.count():
        for topic in TOPICS:
            for template in TEMPLATES:
                yield template.format(topic) + (f" ({n})" if n else "")


QUESTIONS = fresh_questions()

BATCH_PROMPTS = [
    f"Summarise this support ticket in one sentence: customer {i} cannot log in after "
    f"changing their password on device {i % 3}, and the reset email never arrives."
    for i in range(100)
]

SEED = """
from django.contrib.auth.models import User
from django.test import Client
from tenants.models import Membership
from tenants.services import api_key_create, tenant_create
t = tenant_create(slug='bench', name='Bench')
u = User.objects.create_user('bench')
Membership.objects.create(user=u, tenant=t)
_, raw = api_key_create(tenant=t, name='bench')
c = Client()
c.force_login(u)
print(c.cookies['sessionid'].value, raw)
"""


def env_for(workdir: Path, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.pop("REDIS_URL", None)
    if args.redis:
        env["REDIS_URL"] = args.redis
        env["QASSIST_REDIS_PREFIX"] = f"bench-batch-{uuid.uuid4().hex[:8]}"
    env.update(
        {
            "DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
            "QASSIST_VAR_DIR": str(workdir),
            "QASSIST_ENGINE": "redis" if args.redis else "embedded",
            "QASSIST_MODEL": args.model,
            "QASSIST_PRELOAD_ENGINE": "1",
            "QASSIST_GENERATE_TITLES": "0",
            "QASSIST_DEFAULT_TEMPERATURE": "0",
            "QASSIST_DEFAULT_MAX_TOKENS": str(args.max_tokens),
            "QASSIST_BATCH_CONCURRENCY": str(args.batch_concurrency),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


async def ask_all(url: str, origin: str, cookie: str, while_running: Any = None) -> list[float]:
    """TTFTs of the questions asked one after the other: the ten once, or — with
    `while_running`, an async check — cycling through them for as long as it says the batch
    still runs, so that every sample was asked while the batch ran."""
    ttfts = []
    headers = {"Cookie": f"sessionid={cookie}"}
    questions: Any = itertools.islice(QUESTIONS, 10) if while_running is None else QUESTIONS
    async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:  # type: ignore[arg-type]
        for question in questions:
            if while_running is not None and not await while_running():
                break
            sent = time.perf_counter()
            first = None
            await ws.send(json.dumps({"type": "chat.send", "session": None, "content": question}))
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "delta" and first is None:
                    first = time.perf_counter()
                elif frame["type"] == "error" and "reply_id" not in frame:
                    raise RuntimeError(frame)
                elif frame["type"] == "reply.done":
                    ttfts.append(((first or time.perf_counter()) - sent) * 1000)
                    break
    return ttfts


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_batch(
    args: argparse.Namespace,
    base: str,
    raw_key: str,
    model: str,
    prompts: list[str],
    ws_url: str,
    cookie: str,
) -> tuple[float, dict[str, int], list[float]]:
    """Submit one batch over REST, ask questions over the websocket for as long as it runs,
    wait for it to end; its duration, item counts, and the questions' TTFTs."""
    headers = {"Authorization": f"Bearer {raw_key}"}
    body = {
        "name": f"bench {uuid.uuid4().hex[:6]}",
        "requests": [
            {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": args.max_tokens,
                "temperature": 0,
            }
            for prompt in prompts
        ],
    }
    started = time.perf_counter()
    created = httpx.post(f"{base}/v1/batches", json=body, headers=headers, timeout=30)
    created.raise_for_status()
    batch_id = created.json()["id"]

    async def batch_running() -> bool:
        async with httpx.AsyncClient(timeout=30) as client:
            reply = await client.get(f"{base}/v1/batches/{batch_id}", headers=headers)
        return reply.json()["status"] not in ("completed", "cancelled")

    asked = asyncio.run(ask_all(ws_url, base, cookie, while_running=batch_running))
    while True:
        status = httpx.get(f"{base}/v1/batches/{batch_id}", headers=headers).json()
        if status["status"] in ("completed", "cancelled"):
            break
        time.sleep(0.2)
    return time.perf_counter() - started, status["request_counts"], asked


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch-concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="idle questions, then a batch")
    parser.add_argument("--database-url", default="", help="else a scratch SQLite file")
    parser.add_argument(
        "--redis", default="", help="Redis mode on this Redis (three processes; else embedded)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="qassist-bench-batch-") as tmp:
        workdir = Path(tmp)
        env = env_for(workdir, args)
        subprocess.run(
            [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], env=env, cwd=ROOT, check=True
        )
        seeded = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", SEED],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        cookie, raw_key = seeded.stdout.strip().splitlines()[-1].split()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        log = workdir / "daphne.log"
        with ExitStack() as stack:
            if args.redis:
                for name, cmd in {
                    "worker": [PYTHON, "manage.py", "run_inference_worker"],
                    "celery": [
                        PYTHON,
                        "-m",
                        "celery",
                        "-A",
                        "qassist",
                        "worker",
                        "-c",
                        "1",
                        "--loglevel",
                        "WARNING",
                    ],
                }.items():
                    stack.enter_context(process(cmd, env, workdir / f"{name}.log"))
            proc = stack.enter_context(process([*daphne, "qassist.asgi:application"], env, log))
            wait_http(f"{base}/healthz", 120, proc, log)
            ws_url = f"ws://127.0.0.1:{port}/ws/chat/"
            asyncio.run(ask_all(ws_url, base, cookie))  # warm up: KV, code paths
            model = httpx.get(
                f"{base}/v1/models", headers={"Authorization": f"Bearer {raw_key}"}
            ).json()["data"][0]["id"]
            idle: list[float] = []
            loaded: list[float] = []
            took: list[float] = []
            outcomes: collections.Counter[str] = collections.Counter()
            for round_ in range(args.rounds):
                idle += asyncio.run(ask_all(ws_url, base, cookie))
                prompts = BATCH_PROMPTS[round_ * args.batch :][: args.batch]
                seconds, counts, asked = run_batch(
                    args, base, raw_key, model, prompts, ws_url, cookie
                )
                loaded += asked
                took.append(seconds)
                outcomes.update(counts)

        print(
            f"model {args.model}, batch of {args.batch} prompts, max_tokens {args.max_tokens}, "
            f"{args.batch_concurrency} batch items in flight, "
            f"{'Redis mode (web, worker, Celery)' if args.redis else 'embedded mode'}"
        )
        print("| interactive user | TTFT p50 ms | TTFT p95 ms |")
        print("|---|---|---|")
        print(f"| idle | {pct(idle, 0.5):.0f} | {pct(idle, 0.95):.0f} |")
        print(f"| while the batch runs | {pct(loaded, 0.5):.0f} | {pct(loaded, 0.95):.0f} |")
        print(
            f"| ratio | {pct(loaded, 0.5) / pct(idle, 0.5):.2f}x | "
            f"{pct(loaded, 0.95) / pct(idle, 0.95):.2f}x |"
        )
        print(
            f"\n{args.rounds} batches of {args.batch}, each took "
            f"{', '.join(f'{t:.1f}' for t in took)} s; items {dict(outcomes)}; "
            f"{len(idle)} questions idle, {len(loaded)} while a batch ran"
        )


if __name__ == "__main__":
    main()
