"""Does a batch slow interactive users down? A websocket user's time to first token while idle,
then while a batch of 20 prompts runs, on the embedded model, in the same run.

    PYTHONPATH=$PWD python bench/batch_interactive.py [--model smollm2-135m] [--batch 20]
        [--max-tokens 64] [--batch-concurrency 4]

Starts daphne in the embedded mode (the engine and the batch runner in the web process) on a
scratch SQLite database, then:
  1. idle: one browser user asks ten short questions one after the other over the websocket;
  2. loaded: the same user asks them again right after a batch of --batch prompts is submitted
     over REST (`POST /v1/batches`), while the batch runs;
and prints TTFT p50 / p95 for both, their ratio, and how long the batch took. The target: the
loaded TTFT within 1.5x of the idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.run import PYTHON, ROOT, free_port, process, wait_http

QUESTIONS = [
    "What is a good name for a cat?",
    "Give me one tip for writing clear emails.",
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "How many days are in a week?",
    "What does a compiler do?",
    "Suggest a short title for a meeting about budgets.",
    "What is 12 times 12?",
    "Say hello in Chinese.",
    "What is the boiling point of water?",
]

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
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite3'}",
            "QASSIST_VAR_DIR": str(workdir),
            "QASSIST_ENGINE": "embedded",
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
    if while_running is None:
        questions: Any = iter(QUESTIONS)
    else:
        questions = itertools.cycle(QUESTIONS)
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch-concurrency", type=int, default=4)
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
        with process([*daphne, "qassist.asgi:application"], env, log) as proc:
            wait_http(f"{base}/healthz", 120, proc, log)
            ws_url = f"ws://127.0.0.1:{port}/ws/chat/"
            asyncio.run(ask_all(ws_url, base, cookie))  # warm up: KV, code paths
            idle = asyncio.run(ask_all(ws_url, base, cookie))

            model = httpx.get(
                f"{base}/v1/models", headers={"Authorization": f"Bearer {raw_key}"}
            ).json()["data"][0]["id"]
            body = {
                "name": f"bench {uuid.uuid4().hex[:6]}",
                "requests": [
                    {
                        "model": model,
                        "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": args.max_tokens,
                        "temperature": 0,
                    }
                    for prompt in BATCH_PROMPTS[: args.batch]
                ],
            }
            started = time.perf_counter()
            created = httpx.post(
                f"{base}/v1/batches",
                json=body,
                headers={"Authorization": f"Bearer {raw_key}"},
                timeout=30,
            )
            created.raise_for_status()
            batch_id = created.json()["id"]

            async def batch_running() -> bool:
                async with httpx.AsyncClient(timeout=30) as client:
                    reply = await client.get(
                        f"{base}/v1/batches/{batch_id}",
                        headers={"Authorization": f"Bearer {raw_key}"},
                    )
                return reply.json()["status"] not in ("completed", "cancelled")

            loaded = asyncio.run(ask_all(ws_url, base, cookie, while_running=batch_running))
            during = f"{len(loaded)} questions asked while it ran"
            while True:
                status = httpx.get(
                    f"{base}/v1/batches/{batch_id}",
                    headers={"Authorization": f"Bearer {raw_key}"},
                ).json()
                if status["status"] in ("completed", "cancelled"):
                    break
                time.sleep(0.5)
            batch_seconds = time.perf_counter() - started

        print(
            f"model {args.model}, batch of {args.batch} prompts, max_tokens {args.max_tokens}, "
            f"{args.batch_concurrency} batch items in flight"
        )
        print("| interactive user | TTFT p50 ms | TTFT p95 ms |")
        print("|---|---|---|")
        print(f"| idle | {pct(idle, 0.5):.0f} | {pct(idle, 0.95):.0f} |")
        print(f"| while the batch runs | {pct(loaded, 0.5):.0f} | {pct(loaded, 0.95):.0f} |")
        print(
            f"| ratio | {pct(loaded, 0.5) / pct(idle, 0.5):.2f}x | "
            f"{pct(loaded, 0.95) / pct(idle, 0.95):.2f}x |"
        )
        counts = status["request_counts"]
        print(
            f"\nbatch: {status['status']} in {batch_seconds:.1f} s, {counts['completed']} done, "
            f"{counts['failed']} failed; {during}"
        )


if __name__ == "__main__":
    main()
