"""Structured output and embeddings over the REST API (issue #19), in one run of one server.

    python -m bench.structured                                   # everything, qwen2.5-coder-0.5b
    python -m bench.structured --only validate --requests 200    # the validation part alone
    python -m bench.structured --only throughput --concurrency 16
    python -m bench.structured --only embeddings

qassist runs as `make run` runs it without Redis (daphne with the engine on a thread of its own,
`QASSIST_ENGINE=embedded`), with a tenant and an API key made by the management commands;
clients speak OpenAI's API over HTTP, as an integration does.

  validate     N requests (200) with a nested schema (objects, arrays, enums, numbers, a
               nullable string), each asked about a different order, C at a time: every reply
               is parsed and validated with `jsonschema`; counts of parsed, valid and finish
               reasons.
  throughput   the same prompts at concurrency C (16) constrained (`response_format`
               json_schema) and free (the same messages, the schema instruction included, no
               response_format), in passes A B B A so that drift on a shared machine falls on
               both: completion tokens/s of each and their ratio (target: constrained within
               15% of free).
  embeddings   `POST /v1/embeddings` with the product's embedder, one text per request and 32
               per request: texts/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from bench.run import PYTHON, ROOT, free_port, process, wait_http

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 40},
                "tier": {"enum": ["free", "pro", "enterprise"]},
            },
            "required": ["name", "tier"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "product": {"type": "string", "maxLength": 40},
                    "quantity": {"type": "integer"},
                    "unit_price": {"type": "number"},
                },
                "required": ["product", "quantity", "unit_price"],
                "additionalProperties": False,
            },
        },
        "priority": {"enum": ["low", "normal", "urgent"]},
        "total": {"type": "number"},
        "gift": {"type": "boolean"},
        "notes": {"anyOf": [{"type": "string", "maxLength": 80}, {"type": "null"}]},
    },
    "required": ["customer", "items", "priority", "total", "gift", "notes"],
    "additionalProperties": False,
}
SYSTEM = "You turn customer e-mails into order records."
INSTRUCTION = "Reply with JSON only, following this JSON Schema:\n"  # as chat.api.structured
NAMES = [
    "Ana Silva",
    "Bo Chen",
    "Chidi Okafor",
    "Dana Weiss",
    "李雷",
    "Emre Kaya",
    "王芳",
    "Femi Ade",
]
TIERS = ["free", "pro", "enterprise"]
PRODUCTS = [
    ("USB-C dock", 89.0),
    ("27-inch monitor", 249.5),
    ("ergonomic chair", 310.0),
    ("laptop stand", 35.99),
    ("noise-cancelling headset", 129.0),
    ("webcam", 59.9),
    ("机械键盘", 75.0),
]


def prompts(n: int, seed: int = 19) -> list[str]:
    """N e-mails, each about its own order (deterministic)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        items = rng.sample(PRODUCTS, rng.randint(1, 3))
        lines = ", ".join(f"{rng.randint(1, 5)} x {p} at {price} each" for p, price in items)
        urgent = rng.choice(["", " We need it by Monday, it is urgent.", " No rush."])
        gift = rng.choice(["", " Please wrap it as a gift."])
        out.append(
            f"Order #{1000 + i} from {rng.choice(NAMES)} ({rng.choice(TIERS)} plan): "
            f"{lines}.{urgent}{gift}"
        )
    return out


def messages(prompt: str, *, with_instruction: bool) -> list[dict[str, str]]:
    """The request's messages; the free pass adds the schema instruction qassist adds to a
    constrained request itself, so both passes prefill the same prompt."""
    out = [{"role": "system", "content": SYSTEM}]
    if with_instruction:
        schema = json.dumps(SCHEMA, ensure_ascii=False, separators=(",", ":"))
        out.append({"role": "system", "content": INSTRUCTION + schema})
    out.append({"role": "user", "content": prompt})
    return out


@dataclass
class Reply:
    text: str
    finish: str
    completion_tokens: int
    seconds: float


@dataclass
class Pass:
    name: str
    wall: float = 0.0
    replies: list[Reply] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(r.completion_tokens for r in self.replies)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall if self.wall else 0.0


class Server:
    """A qassist in the embedded mode on a free port, with a tenant and a key."""

    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
        self.env.pop("REDIS_URL", None)
        self.env.update(
            {
                "DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite3'}",
                "QASSIST_VAR_DIR": str(workdir),
                "QASSIST_ENGINE": "embedded",
                "QASSIST_NO_REDIS": "1",
                "QASSIST_MODEL": args.model,
                "QASSIST_MODELS_DIR": str(ROOT / "models"),
                "QASSIST_PARALLEL": str(args.concurrency),
                "QASSIST_CONTEXT_SIZE": str(args.concurrency * 2048),
                "QASSIST_MAX_SEQ_TOKENS": "2048",
                "QASSIST_MIN_STREAM_SPEED": "0",  # run all C together: the C being measured
                "QASSIST_THREADS": str(args.threads),
                "QASSIST_DEFAULT_TEMPERATURE": "0",
                "QASSIST_GENERATE_TITLES": "0",
                "QASSIST_MAX_QUEUE": "1024",
                "QASSIST_API_KEY_MAX_STREAMS": "1024",
                "QASSIST_HOST_CACHE_MB": "0",  # every request a new conversation: nothing to keep
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "LOG_LEVEL": "WARNING",
            }
        )
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logs = workdir

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            env=self.env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def setup(self) -> str:
        """Migrate, make the tenant; its new API key."""
        self.manage("migrate", "-v0")
        self.manage("create_tenant", "bench")
        return self.manage("create_api_key", "bench").strip().splitlines()[-1]

    def command(self) -> list[str]:
        return [
            PYTHON,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(self.port),
            "qassist.asgi:application",
        ]


async def complete(
    client: httpx.AsyncClient, prompt: str, *, model: str, constrained: bool, max_tokens: int
) -> Reply:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages(prompt, with_instruction=not constrained),
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if constrained:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": SCHEMA, "strict": True},
        }
    started = time.perf_counter()
    response = await client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    data = response.json()
    choice = data["choices"][0]
    return Reply(
        choice["message"]["content"] or "",
        choice["finish_reason"],
        int(data["usage"]["completion_tokens"]),
        time.perf_counter() - started,
    )


async def closed_loop(
    client: httpx.AsyncClient, items: list[str], concurrency: int, **kwargs: Any
) -> tuple[float, list[Reply]]:
    """`concurrency` clients, each sending its next request when its last one is answered."""
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for pair in enumerate(items):
        queue.put_nowait(pair)
    replies: list[Reply | None] = [None] * len(items)

    async def worker() -> None:
        while not queue.empty():
            i, prompt = queue.get_nowait()
            replies[i] = await complete(client, prompt, **kwargs)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, [r for r in replies if r is not None]


def validate(replies: list[Reply]) -> dict[str, Any]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    parsed = valid = 0
    problems: list[str] = []
    for reply in replies:
        try:
            value = json.loads(reply.text)
        except ValueError as exc:
            problems.append(f"does not parse ({exc}): {reply.text[:80]!r}")
            continue
        parsed += 1
        errors = list(validator.iter_errors(value))
        if errors:
            problems.append(f"invalid: {errors[0].message}")
        else:
            valid += 1
    return {
        "requests": len(replies),
        "parsed": parsed,
        "valid": valid,
        "finish_reasons": dict(Counter(r.finish for r in replies)),
        "completion_tokens_mean": round(statistics.mean(r.completion_tokens for r in replies), 1),
        "problems": problems[:10],
    }


async def grammar_counters(client: httpx.AsyncClient) -> tuple[int, int]:
    """The engine's tokens sampled under a grammar and those sampled again (from /healthz's
    details, which a caller on the machine itself gets)."""
    health = (await client.get("/healthz")).json()
    workers = health.get("engine", {}).get("workers") or [{}]
    return int(workers[0].get("grammar_tokens", 0)), int(workers[0].get("grammar_resamples", 0))


async def run_validate(client: httpx.AsyncClient, args: argparse.Namespace) -> dict[str, Any]:
    before = await grammar_counters(client)
    wall, replies = await closed_loop(
        client,
        prompts(args.requests),
        args.concurrency,
        model=args.model,
        constrained=True,
        max_tokens=args.max_tokens,
    )
    result = validate(replies)
    after = await grammar_counters(client)
    tokens, resampled = after[0] - before[0], after[1] - before[1]
    result["grammar_resampled_share"] = round(resampled / tokens, 3) if tokens else None
    result["wall_seconds"] = round(wall, 1)
    result["tokens_per_second"] = round(sum(r.completion_tokens for r in replies) / wall, 1)
    return result


async def run_throughput(client: httpx.AsyncClient, args: argparse.Namespace) -> dict[str, Any]:
    items = prompts(args.throughput_requests, seed=1919)
    passes: dict[str, Pass] = {"constrained": Pass("constrained"), "free": Pass("free")}
    common = {"model": args.model, "max_tokens": args.max_tokens}
    await closed_loop(client, items[:2], 2, constrained=True, **common)  # warm up
    for name in ("constrained", "free", "free", "constrained"):
        wall, replies = await closed_loop(
            client, items, args.concurrency, constrained=name == "constrained", **common
        )
        passes[name].wall += wall
        passes[name].replies += replies
    free, constrained = passes["free"], passes["constrained"]
    ratio = constrained.tokens_per_second / free.tokens_per_second if free.wall else 0.0
    return {
        "concurrency": args.concurrency,
        "requests_per_pass": len(items),
        "free_tokens_per_second": round(free.tokens_per_second, 1),
        "constrained_tokens_per_second": round(constrained.tokens_per_second, 1),
        "ratio": round(ratio, 3),
        "within_15_percent": ratio >= 0.85,
        "free_completion_tokens": free.tokens,
        "constrained_completion_tokens": constrained.tokens,
        "constrained_valid": validate(constrained.replies)["valid"],
    }


async def run_embeddings(client: httpx.AsyncClient, args: argparse.Namespace) -> dict[str, Any]:
    texts = [p.split(": ", 1)[1] for p in prompts(320, seed=7)]
    model = args.embedding_model

    async def embed(batch: list[str]) -> None:
        response = await client.post("/v1/embeddings", json={"model": model, "input": batch})
        response.raise_for_status()
        assert len(response.json()["data"]) == len(batch)

    await embed(texts[:4])  # the embedder loads on first use
    out: dict[str, Any] = {}
    for size in (1, 32):
        n = 64 if size == 1 else 320
        started = time.perf_counter()
        for i in range(0, n, size):
            await embed(texts[i : i + size])
        out[f"texts_per_second_batch_{size}"] = round(n / (time.perf_counter() - started), 1)
    return out


async def bench(args: argparse.Namespace, server: Server, key: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    results: dict[str, Any] = {"model": args.model, "threads": args.threads}
    async with httpx.AsyncClient(base_url=server.base, headers=headers, timeout=900) as client:
        if args.only in (None, "validate"):
            results["validate"] = await run_validate(client, args)
            print(json.dumps({"validate": results["validate"]}, ensure_ascii=False), flush=True)
        if args.only in (None, "throughput"):
            results["throughput"] = await run_throughput(client, args)
            print(json.dumps({"throughput": results["throughput"]}), flush=True)
        if args.only in (None, "embeddings"):
            results["embeddings"] = await run_embeddings(client, args)
            print(json.dumps({"embeddings": results["embeddings"]}), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--embedding-model", default="use-multilingual-v3")
    parser.add_argument("--only", choices=["validate", "throughput", "embeddings"])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--throughput-requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qassist-structured-") as tmp:
        server = Server(Path(tmp), args)
        key = server.setup()
        with process(server.command(), server.env, Path(tmp) / "web.log") as web:
            wait_http(f"{server.base}/healthz", 180, web, Path(tmp) / "web.log")
            results = asyncio.run(bench(args, server, key))
    print(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
