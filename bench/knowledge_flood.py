"""Thousands of documents at once while people chat (issue #12 §1 and §6).

    python -m bench.knowledge_flood                    # 5,000 files
    python -m bench.knowledge_flood --files 500

Real processes on a private Redis and a SQLite database, as `make run` starts them in Redis
mode: daphne, the inference worker (the embedded model), and a Celery worker taking the
product's queues (interactive, celery, knowledge, batches). A tenant's integration uploads
`--files` small Markdown documents over REST (`POST /v1/knowledge/documents`, 8 at a time),
and among them the hostile files of bench/rag_eval/data/bad (a PNG named .pdf, text named
.docx, an empty file, a corrupt and an encrypted PDF, a DOCX zip bomb, binary junk). Meanwhile
an employee of the same tenant chats over the websocket, a question every 2 s.

Checked (PASS/FAIL):
- every upload got an answer: 202 (queued) or a refusal with its reason (4xx, never 5xx);
- every accepted good file ends `ready`, every hostile one refused or `failed` with a reason;
- the Celery worker is the same process at the end (it survived the zip bomb and the rest);
- no partial index: each time it is looked at, every passage belongs to a document whose
  indexing finished (a document's passages are written in one transaction);
- the employee's questions are all answered during the flood.

Reported: upload rate, indexing rate (documents/s from the first upload to the last ready), and
the chat's time to first token before and during the flood (p50 / p95).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.reliability import (
    PYTHON,
    ROOT,
    base_env,
    chat_once,
    manage,
    private_redis,
    verdict,
    wait_healthy,
)
from bench.run import free_port, process

BAD = ROOT / "bench" / "rag_eval" / "data" / "bad"
QUESTIONS = [
    "What is the code word of note 17?",
    "Which colour does note 4012 mention?",
    "Tell me the code word of note 250.",
    "What does note 3 say about the kiwi?",
]
ACCOUNTS = """
import json
from django.contrib.auth.models import User
from django.test import Client
from tenants.models import Membership, Tenant
from tenants.services import api_key_create, tenant_create
tenant = tenant_create(slug="flood", name="Flood")
user = User.objects.create_user("flood-user")
Membership.objects.create(user=user, tenant=tenant)
client = Client()
client.force_login(user)
_, key = api_key_create(tenant=tenant, name="bulk upload")
print(json.dumps({"cookie": client.cookies["sessionid"].value, "key": key}))
"""
# The documents' states; and ready documents whose passages are not exactly those of their
# version (a partial index: a document's passages are written in one transaction).
STATUSES = """
import json
from django.db.models import Count
from knowledge.models import Chunk, Document
rows = Document.objects.values("status").annotate(n=Count("id"))
errors = sorted(set(Document.objects.filter(status="failed").values_list("error", flat=True)))
mismatched = sum(
    1 for d in Document.objects.filter(status="ready")
    if Chunk.objects.filter(document=d, version=d.version).count() != d.chunk_count
)
print(json.dumps({"statuses": {r["status"]: r["n"] for r in rows}, "errors": errors,
                  "ready_with_other_passage_count": mismatched}))
"""


def note(i: int) -> bytes:
    colours = ["red", "green", "blue", "amber", "violet"]
    return (
        f"# Note {i}\n\n## Details\n\nThe code word of note {i} is kiwi{i}. It mentions the "
        f"colour {colours[i % len(colours)]} and was filed by team {i % 37}.\n"
    ).encode()


async def upload_all(base: str, key: str, files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """POST every file, 8 at a time; counts by status and the refusals' codes."""
    statuses: dict[int, int] = {}
    refusals: dict[str, str] = {}
    gate = asyncio.Semaphore(8)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(name: str, data: bytes) -> None:
            async with gate:
                response = await client.post(
                    f"{base}/v1/knowledge/documents",
                    headers=headers,
                    files={"file": (name, data)},
                )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code != 202:
                error = response.json().get("error", {})
                refusals[name] = (
                    f"{response.status_code} {error.get('code')}: {error.get('message')}"
                )

        await asyncio.gather(*(one(name, data) for name, data in files))
    return {"statuses": statuses, "refusals": refusals}


async def chatter(ws_url: str, base: str, cookie: str, stop: asyncio.Event) -> list[Any]:
    outcomes = []
    i = 0
    while not stop.is_set():
        outcomes.append(await chat_once(ws_url, base, cookie, QUESTIONS[i % len(QUESTIONS)], 0))
        i += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.0)
    return outcomes


def ttft(outcomes: list[Any]) -> str:
    values = sorted(o.first_delta - o.sent for o in outcomes if o.first_delta is not None)
    if not values:
        return "—"
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values):.2f} / {p95:.2f} s ({len(values)} questions)"


def shell_json(env: dict[str, str], script: str) -> Any:
    return json.loads(manage(env, "shell", "-c", script).strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    with (
        tempfile.TemporaryDirectory(prefix="qassist-flood-") as tmp,
        private_redis(Path(tmp)) as redis_url,
    ):
        workdir = Path(tmp)
        env = base_env(
            workdir,
            redis_url,
            f"sqlite:///{workdir / 'db.sqlite3'}",
            QASSIST_DEFAULT_MAX_TOKENS="48",
            QASSIST_KNOWLEDGE_STORAGE_MB="2000",
            QASSIST_WORKER_HEARTBEAT_SECONDS="30",
        )
        env.pop("QASSIST_EMBEDDING_MODEL", None)  # the product's default embedder
        manage(env, "migrate", "--noinput", "-v", "0")
        accounts = shell_json(env, ACCOUNTS)
        port = free_port()
        base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws/chat/"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                  "qassist.asgi:application"]  # fmt: skip
        worker = [PYTHON, "manage.py", "run_inference_worker"]
        celery = [PYTHON, "-m", "celery", "-A", "qassist", "worker", "--loglevel", "INFO",
                  "--pool", "solo", "-Q", "interactive,celery,knowledge,batches"]  # fmt: skip
        logs = args.logs
        with (
            process(worker, env, logs / "worker.log"),
            process(celery, env, logs / "celery.log") as celery_proc,
            process(daphne, env, logs / "web.log"),
        ):
            wait_healthy(base)
            cookie, key = accounts["cookie"], accounts["key"]
            # One document first, so the chat searches from the start; then the baseline.
            asyncio.run(upload_all(base, key, [("note-0.md", note(0))]))
            time.sleep(5)
            before = asyncio.run(_baseline(ws_url, base, cookie))
            files = [(f"note-{i}.md", note(i)) for i in range(1, args.files)]
            bad = sorted(p for p in BAD.iterdir() if p.is_file())
            step = max(1, len(files) // (len(bad) + 1))
            for n, path in enumerate(bad, start=1):
                files.insert(n * step, (path.name, path.read_bytes()))
            bad_names = {p.name for p in bad}
            result, during, partial, finished, upload_seconds = asyncio.run(
                _flood(args, env, base, ws_url, cookie, key, files)
            )
            survived = celery_proc.poll() is None
        final = shell_json(env, STATUSES)
        statuses = final["statuses"]
        accepted_bad = sum(1 for name in bad_names if name not in result["refusals"])
        good = len(files) + 1 - len(bad_names)
        print(f"uploads: {result['statuses']} in {upload_seconds:.0f} s "
              f"({len(files) / upload_seconds:.0f}/s)")  # fmt: skip
        for name, why in sorted(result["refusals"].items()):
            print(f"  refused {name}: {why}")
        print(f"documents: {statuses}; failed with: {final['errors']}")
        if finished:
            indexed = len(files) + 1 - len(result["refusals"])
            print(f"indexing: every document done {finished:.0f} s after the first upload "
                  f"({indexed / finished:.1f} documents/s)")  # fmt: skip
        print(f"chat TTFT p50 / p95: before {ttft(before)}, during the flood {ttft(during)}")
        answered = [o for o in during if o.status == "complete"]
        checks = {
            "every upload answered 202 or a 4xx with its reason (no 5xx)": all(
                200 <= s < 500 for s in result["statuses"]
            ),
            f"all {good} good documents ready": statuses.get("ready", 0) == good,
            "every hostile file refused at upload or failed with a reason": statuses.get(
                "failed", 0
            )
            == accepted_bad
            and all(final["errors"]),
            "the Celery worker survived (same process throughout)": survived,
            "no partial index seen while indexing": partial == [0] * len(partial)
            and final["ready_with_other_passage_count"] == 0,
            f"the employee's {len(during)} questions during the flood all answered": bool(during)
            and len(answered) == len(during),
        }
        return verdict(checks)


async def _baseline(ws_url: str, base: str, cookie: str) -> list[Any]:
    return [await chat_once(ws_url, base, cookie, q, 0) for q in QUESTIONS]


async def _flood(
    args: argparse.Namespace,
    env: dict[str, str],
    base: str,
    ws_url: str,
    cookie: str,
    key: str,
    files: list[tuple[str, bytes]],
) -> tuple[dict[str, Any], list[Any], list[int], float, float]:
    stop = asyncio.Event()
    chat = asyncio.create_task(chatter(ws_url, base, cookie, stop))
    started = time.monotonic()
    result = await upload_all(base, key, files)
    upload_seconds = time.monotonic() - started
    partial: list[int] = []
    finished = 0.0
    deadline = started + args.timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(10)
        state = await asyncio.to_thread(shell_json, env, STATUSES)
        partial.append(int(state["ready_with_other_passage_count"]))
        busy = state["statuses"].get("queued", 0) + state["statuses"].get("indexing", 0)
        print(f"  {time.monotonic() - started:5.0f} s: {state['statuses']}", flush=True)
        if not busy:
            finished = time.monotonic() - started
            break
    stop.set()
    during = await chat
    return result, during, partial, finished, upload_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--logs", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-logs-")))
    args = parser.parse_args()
    print(f"logs in {args.logs}", flush=True)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
