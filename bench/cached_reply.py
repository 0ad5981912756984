"""A cached reply end to end over the chat websocket: how long from sending a question to its
first text and to the stored reply, p50 / p95.

    PYTHONPATH=$PWD python bench/cached_reply.py [--redis-url redis://127.0.0.1:6379/15]
        [--clients 1,8] [--requests 100] [--replies 500]

Starts daphne on a scratch SQLite database with --replies cached replies (the tenant's own and
shared ones, as a deployment would have), logs a user in, and runs C websocket clients, each
sending --requests first questions that the cache answers, one after the other, at most about
7.7 a second (the consumer's frame limit is 10 a second per socket; every question
opens a new conversation, as only first messages are answered from the cache). Run twice: the
embedded mode (the index's version in the process) and, with --redis-url, the Redis mode (one
GET per lookup). No model is loaded: a cached reply never reaches the engine. The REST surface
is not measured here: its API is not on this branch yet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import websockets

from bench.run import PYTHON, ROOT, free_port, process

PACE_SECONDS = 0.13


def env_for(workdir: Path, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite3'}",
            "QASSIST_VAR_DIR": str(workdir),
            "REDIS_URL": redis_url,
            "QASSIST_REDIS_PREFIX": f"bench-{uuid.uuid4().hex[:8]}",
            "QASSIST_PRELOAD_ENGINE": "0",
            "QASSIST_GENERATE_TITLES": "0",
            # All clients are one bench user: let them all have a reply going at once.
            "QASSIST_USER_MAX_STREAMS": "64",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


SEED = """
from django.contrib.auth.models import User
from django.test import Client
from chat.models import CachedReply
from tenants.models import Membership
from tenants.services import tenant_create
t = tenant_create(slug='bench', name='Bench')
u = User.objects.create_user('bench')
Membership.objects.create(user=u, tenant=t)
replies = int({replies})
for i in range(replies):
    CachedReply.objects.create(
        tenant=t if i % 2 else None,
        question=f'How do I do task number {{i}}?',
        alternatives=f'task {{i}} how\\n任务 {{i}} 怎么做？',
        answer=('Step one, step two, step three. ' * 10) + str(i),
    )
c = Client()
c.force_login(u)
print(c.cookies['sessionid'].value)
"""


def seed(env: dict[str, str], replies: int) -> str:
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], env=env, cwd=ROOT, check=True
    )
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", SEED.format(replies=replies)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


async def client(
    url: str, origin: str, cookie: str, questions: list[str]
) -> list[tuple[float, float]]:
    timings = []
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:  # type: ignore[arg-type]
        for question in questions:
            sent = time.perf_counter()
            first = None
            await ws.send(json.dumps({"type": "chat.send", "session": None, "content": question}))
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "delta" and first is None:
                    first = time.perf_counter()
                elif frame["type"] == "error":
                    raise RuntimeError(frame)
                elif frame["type"] == "reply.done":
                    end = time.perf_counter()
                    if not frame["reply"]["served_from_cache"]:
                        raise RuntimeError(f"not served from the cache: {question!r}")
                    timings.append(((first or end) - sent, end - sent))
                    break
            # The consumer allows a client 10 frames a second: a person, not a flood.
            await asyncio.sleep(max(0.0, PACE_SECONDS - (time.perf_counter() - sent)))
    return timings


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def run_mode(name: str, redis_url: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="qassist-bench-cache-") as tmp:
        workdir = Path(tmp)
        env = env_for(workdir, redis_url)
        cookie = seed(env, args.replies)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        with process([*daphne, "qassist.asgi:application"], env, workdir / "daphne.log") as proc:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"daphne exited; see {workdir / 'daphne.log'}")
                try:
                    httpx.get(f"{base}/accounts/login/", timeout=2)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
            ws_url = f"ws://127.0.0.1:{port}/ws/chat/"
            for concurrency in args.clients:
                # Alternating phrasings, Chinese and Latin, as users type them.
                def questions(c: int) -> list[str]:
                    return [
                        (
                            f"how do i do TASK NUMBER {(c * 7 + i) % args.replies}"
                            if i % 2
                            else f"任务 {(c * 7 + i) % args.replies} 怎么做"
                        )
                        for i in range(args.requests)
                    ]

                asyncio.run(client(ws_url, base, cookie, questions(0)[:5]))  # warm up
                started = time.perf_counter()
                batches = asyncio.run(_gather(ws_url, base, cookie, concurrency, questions))
                elapsed = time.perf_counter() - started
                first = [t[0] for batch in batches for t in batch]
                done = [t[1] for batch in batches for t in batch]
                print(
                    f"| {name} | {concurrency} | {len(done)} | {len(done) / elapsed:.0f} | "
                    f"{pct(first, 0.5):.1f} | {pct(first, 0.95):.1f} | "
                    f"{pct(done, 0.5):.1f} | {pct(done, 0.95):.1f} |",
                    flush=True,
                )


async def _gather(url, origin, cookie, concurrency, questions):
    return await asyncio.gather(
        *(client(url, origin, cookie, questions(c)) for c in range(concurrency))
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--replies", type=int, default=500)
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    print(
        "| mode | clients | replies served | replies/s | first text p50 ms | p95 ms | "
        "stored reply p50 ms | p95 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    run_mode("embedded (version in process)", "", args)
    if args.redis_url:
        run_mode("Redis (version in Redis)", args.redis_url, args)


if __name__ == "__main__":
    main()
