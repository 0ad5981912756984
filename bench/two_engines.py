"""Two engines on one host (issue #36, point 4): what a second model's engine costs the first,
with the CPU budget (inference/budget.py) off and on.

    python -m bench.two_engines                        # qwen2.5-coder-0.5b twice, 16 users
    python -m bench.two_engines --model-b smollm2-135m --duration 120 --json two_engines.json

Engines as embedded mode runs them: one per model in this process, each on its own thread,
built by `inference.service.build_engine` from the settings (QASSIST_THREADS, QASSIST_PARALLEL,
...). Model B may be model A under a second name, as the issue's real-model test does: each
engine loads its own copy. `--users` closed-loop users ask model A (each asks again as soon as
its reply ends), for `--duration` seconds after `--warmup`; scenarios:

- **alone**: only A's engine is loaded;
- **idle**: B's engine is loaded too and gets nothing;
- **busy**: `--b-users` closed-loop users ask B meanwhile.

Each scenario runs with the budget off and on (`--budget`), on fresh engines. Reported for A
(and B when busy): replies finished in the window, TTFT p50/p95 (from asking to the first
token), median stream speed (tokens/s of a reply after its first token) and throughput (tokens
generated per second by all of the model's streams); `--json` writes them. Nothing else should
run on the cores meanwhile: the figures are the machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.prompts import PROMPTS

SCENARIOS = ("alone", "idle", "busy")


@dataclass
class Reply:
    asked: float
    ttft: float | None = None
    ended: float = 0.0
    tokens: int = 0
    failed: str = ""


@dataclass
class ModelFigures:
    replies: int
    failed: int
    ttft_p50: float
    ttft_p95: float
    stream_tokens_per_s: float
    throughput_tokens_per_s: float


@dataclass
class Result:
    scenario: str
    budget: str
    a: ModelFigures
    b: ModelFigures | None = None
    turn_wait_a: float = 0.0  # seconds A's engine waited for the turn
    extra: dict[str, Any] = field(default_factory=dict)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(replies: list[Reply], start: float, end: float) -> ModelFigures:
    """Replies asked after `start` and finished by `end`; tokens of every reply within."""
    done = [r for r in replies if r.asked >= start and r.ended and r.ended <= end and not r.failed]
    ttfts = [r.ttft for r in done if r.ttft is not None]
    speeds = [
        (r.tokens - 1) / (r.ended - r.asked - r.ttft)
        for r in done
        if r.ttft is not None and r.tokens > 1 and r.ended - r.asked > r.ttft
    ]
    generated = sum(r.tokens for r in replies if r.ended and start <= r.ended <= end)
    return ModelFigures(
        replies=len(done),
        failed=sum(1 for r in replies if r.failed and r.asked >= start),
        ttft_p50=round(pct(ttfts, 0.50), 3),
        ttft_p95=round(pct(ttfts, 0.95), 3),
        stream_tokens_per_s=round(statistics.median(speeds), 2) if speeds else float("nan"),
        throughput_tokens_per_s=round(generated / max(1e-9, end - start), 2),
    )


async def user(
    client: Any, model: str, n: int, deadline: float, out: list[Reply], args: Any
) -> None:
    from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
    from inference.worker import Submission

    prompts = itertools.cycle(PROMPTS[n % len(PROMPTS) :] + PROMPTS[: n % len(PROMPTS)])
    while time.monotonic() < deadline:
        reply = Reply(asked=time.monotonic())
        out.append(reply)
        sub = Submission(
            uuid.uuid4().hex,
            (ChatMessage("user", next(prompts)),),
            SamplingParams(max_tokens=args.max_tokens, temperature=0.7, seed=n),
            tenant=f"user{n}",
            model=model,
        )
        async for event in client.generate(sub):
            if isinstance(event, Delta):
                if reply.ttft is None:
                    reply.ttft = time.monotonic() - reply.asked
                reply.tokens += 1
            elif isinstance(event, Failed):
                reply.failed = event.code
                await asyncio.sleep(0.5)
            elif isinstance(event, Done):
                reply.tokens = event.completion_tokens or reply.tokens
        reply.ended = time.monotonic()


def start_engine(model: str, name: str, turns: Any) -> Any:
    from inference import service
    from inference.local import LocalEngineClient

    client = LocalEngineClient(
        functools.partial(service.build_engine, model),
        model=name,
        turn=turns.seat() if turns is not None else None,
    )
    client.start()
    if not client.wait_ready(600) or client.load_error:
        sys.exit(f"{name}: the engine did not start: {client.load_error}")
    return client


async def scenario(kind: str, budget: bool, args: argparse.Namespace) -> Result:
    from inference.budget import HostTurns

    # The turns as engine_turn() makes them when the budget is on: a ticket lock of this
    # process and the lock files of the host (fresh for each run).
    turns = HostTurns(Path(tempfile.mkdtemp(prefix="qassist-cpu-"))) if budget else None
    a = start_engine(args.model_a, "A", turns)
    b = start_engine(args.model_b, "B", turns) if kind != "alone" else None
    try:
        began = time.monotonic()
        start, end = began + args.warmup, began + args.warmup + args.duration
        replies_a: list[Reply] = []
        replies_b: list[Reply] = []
        users = [user(a, "A", n, end, replies_a, args) for n in range(args.users)]
        if kind == "busy" and b is not None:
            users += [user(b, "B", 100 + n, end, replies_b, args) for n in range(args.b_users)]
        await asyncio.gather(*users)
        turn = a.turn
        return Result(
            scenario=kind,
            budget="on" if budget else "off",
            a=figures(replies_a, start, end),
            b=figures(replies_b, start, end) if kind == "busy" else None,
            turn_wait_a=round(turn.waited, 2) if turn is not None else 0.0,
        )
    finally:
        for client in (a, b):
            if client is not None:
                client.stop(timeout=30)
                if client.worker is not None:
                    client.worker.engine.runner.close()


def show(result: Result) -> None:
    def line(label: str, f: ModelFigures) -> str:
        return (
            f"  {label}: {f.replies:4d} replies ({f.failed} failed), TTFT p50 {f.ttft_p50:6.2f} s"
            f" p95 {f.ttft_p95:6.2f} s, stream {f.stream_tokens_per_s:6.2f} tok/s, "
            f"throughput {f.throughput_tokens_per_s:7.2f} tok/s"
        )

    print(f"{result.scenario:5s} budget {result.budget:3s} (A waited {result.turn_wait_a} s)")
    print(line("A", result.a))
    if result.b is not None:
        print(line("B", result.b))
    sys.stdout.flush()


def configure(args: argparse.Namespace) -> None:
    """Settings for the run, before Django reads them: nothing kept on disk between runs
    (two engines of one model file would share its folders)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    os.environ["QASSIST_HOST_CACHE_DISK_MB"] = "0"
    os.environ["QASSIST_PASSAGE_KV"] = "0"
    os.environ.setdefault("QASSIST_ENGINE", "embedded")
    import django

    django.setup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-a", default="qwen2.5-coder-0.5b")
    parser.add_argument("--model-b", default="qwen2.5-coder-0.5b")
    parser.add_argument("--users", type=int, default=16, help="closed-loop users of model A")
    parser.add_argument("--b-users", type=int, default=16, help="users of B when it is busy")
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--budget", default="off,on", help="off, on or off,on")
    parser.add_argument("--json", default="", help="write the results to this file")
    args = parser.parse_args()
    configure(args)
    results = []
    for kind in args.scenarios.split(","):
        if kind not in SCENARIOS:
            parser.error(f"unknown scenario {kind!r}: use {', '.join(SCENARIOS)}")
        for budget in args.budget.split(","):
            result = asyncio.run(scenario(kind, budget == "on", args))
            show(result)
            results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": [asdict(r) for r in results]}, f, indent=2)


if __name__ == "__main__":
    main()
