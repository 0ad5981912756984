"""qassist's benchmark: one command, one run, every system on the same model and thread count.

    python -m bench.run [--model qwen2.5-coder-0.5b] [--concurrency 1,4,8,16] [--write]

Measures, in this order and on the same machine state:
  (a) serial: requests one at a time through llama-cpp-python's high-level API
      (`Llama.create_chat_completion(stream=True)`), what the seeds call the default mode;
  (b) qassist end to end: daphne + the websocket chat consumer + the Redis transport + the
      batching inference worker, C concurrent streaming clients (closed loop, R requests each);
  (c) the raw ceiling: llama.cpp batched greedy decode from Python at the same C;
  (d) llama.cpp's own `llama-server -np 16` on the same workload over its OpenAI API, when
      `bench/build_llama_server.sh` has built it (or --llama-server PATH is given).
It prints a table and, with --write, rewrites docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.ceiling import batched_decode_tokens_per_second, prefill_tokens_per_second
from bench.prompts import PROMPTS

ROOT = Path(__file__).resolve().parent.parent
NOTES_HEADING = "\n## Notes\n"
PYTHON = sys.executable


@dataclass
class RequestResult:
    tokens: int
    ttft: float  # seconds from send to the first text
    duration: float  # seconds from send to the end
    error: str = ""

    @property
    def stream_tps(self) -> float:
        generating = self.duration - self.ttft
        return self.tokens / generating if generating > 0 and self.tokens > 1 else 0.0


@dataclass
class RunResult:
    system: str
    concurrency: int
    wall: float
    requests: list[RequestResult] = field(default_factory=list)
    overhead_share: float | None = None
    cpu_share: dict[str, float] = field(default_factory=dict)  # process -> cores used
    # What the engine computed (qassist only, from the worker's counters): prompt tokens
    # computed (not reused), tokens generated, seconds inside llama_decode.
    prefilled: int = 0
    generated: int = 0
    decode_seconds: float = 0.0

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.requests if not r.error]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.ok)

    @property
    def aggregate_tps(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    def ttft(self, q: float) -> float:
        values = sorted(r.ttft for r in self.ok)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    @property
    def stream_tps(self) -> float:
        values = [r.stream_tps for r in self.ok if r.stream_tps > 0]
        return statistics.median(values) if values else 0.0

    @property
    def errors(self) -> int:
        return len(self.requests) - len(self.ok)


def client_prompts(client: int, per_client: int) -> list[str]:
    return [PROMPTS[(client * per_client + i) % len(PROMPTS)] for i in range(per_client)]


# --- (a) serial -------------------------------------------------------------------------------


def run_serial(model: Path, *, requests: int, max_tokens: int, threads: int) -> RunResult:
    from llama_cpp import Llama

    llm = Llama(str(model), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=4)  # warm up
    result = RunResult("serial llama-cpp-python", 1, 0.0)
    started = time.perf_counter()
    for i in range(requests):
        sent = time.perf_counter()
        first = None
        text = ""
        stream = llm.create_chat_completion(
            [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
        )
        for chunk in stream:
            delta: Any = chunk["choices"][0]["delta"]  # type: ignore[index]
            piece = str(delta.get("content") or "")
            if piece and first is None:
                first = time.perf_counter()
            text += piece
        end = time.perf_counter()
        tokens = len(llm.tokenize(text.encode(), add_bos=False, special=False))
        result.requests.append(RequestResult(tokens, (first or end) - sent, end - sent))
    result.wall = time.perf_counter() - started
    del llm
    return result


# --- processes --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def process(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited early; see {log}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer 200 within {timeout} s; see {log}")


# --- (b) qassist ------------------------------------------------------------------------------


def qassist_env(workdir: Path, model: Path, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite3'}",
            "QASSIST_VAR_DIR": str(workdir),
            "REDIS_URL": args.redis_url,
            "QASSIST_REDIS_PREFIX": f"bench-{uuid.uuid4().hex[:8]}",
            "QASSIST_MODEL": str(model),
            "QASSIST_PARALLEL": str(args.parallel),
            "QASSIST_THREADS": str(args.threads),
            "QASSIST_CONTEXT_SIZE": str(args.context_size or args.parallel * 1024),
            "QASSIST_BATCH_TOKENS": str(args.batch_tokens),
            "QASSIST_DEFAULT_MAX_TOKENS": str(args.max_tokens),
            "QASSIST_DEFAULT_TEMPERATURE": "0",
            # Each bench request opens a new conversation; its title request would be work
            # that neither the baseline nor llama-server does.
            "QASSIST_GENERATE_TITLES": os.environ.get("BENCH_TITLES", "0"),
            "QASSIST_MAX_QUEUE": "256",
            # One bench user holds every client's socket and stream.
            "QASSIST_USER_MAX_STREAMS": "1000",
            "QASSIST_WS_MAX_PER_USER": "1000",
            # The machine is shared: a step slowed by other processes is not a dead worker.
            "QASSIST_WORKER_HEARTBEAT_SECONDS": "30",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
        }
    )
    # Any other setting for an A/B run: BENCH_QASSIST_KEPT_KV_TOKENS=0 sets QASSIST_KEPT_KV_TOKENS.
    env.update({k[6:]: v for k, v in os.environ.items() if k.startswith("BENCH_QASSIST_")})
    return env


def login_cookie(env: dict[str, str]) -> str:
    """A logged-in session for a bench user in a bench tenant (made in the bench database)."""
    script = (
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from tenants.models import Membership, Tenant\n"
        "t, _ = Tenant.objects.get_or_create(slug='bench', defaults={'name': 'Bench'})\n"
        "u, _ = User.objects.get_or_create(username='bench')\n"
        "Membership.objects.get_or_create(user=u, tenant=t)\n"
        "c = Client()\n"
        "c.force_login(u)\n"
        "print(c.cookies['sessionid'].value)\n"
    )
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


async def ws_client(url: str, origin: str, cookie: str, prompts: list[str]) -> list[RequestResult]:
    results = []
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:  # type: ignore[arg-type]
        for prompt in prompts:
            sent = time.perf_counter()
            first = None
            await ws.send(json.dumps({"type": "chat.send", "session": None, "content": prompt}))
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "delta" and first is None:
                    first = time.perf_counter()
                elif frame["type"] == "error" and "reply_id" not in frame:
                    results.append(RequestResult(0, 0, 0, frame["message"]))
                    break
                elif frame["type"] == "reply.done":
                    end = time.perf_counter()
                    reply = frame["reply"]
                    results.append(
                        RequestResult(
                            reply["completion_tokens"],
                            (first or end) - sent,
                            end - sent,
                            reply["error"] if reply["status"] == "error" else "",
                        )
                    )
                    break
    return results


async def closed_loop(
    make_client, concurrency: int, per_client: int
) -> tuple[float, list[RequestResult]]:
    started = time.perf_counter()
    batches = await asyncio.gather(
        *(make_client(client_prompts(i, per_client)) for i in range(concurrency))
    )
    return time.perf_counter() - started, [r for batch in batches for r in batch]


def worker_stats(base: str) -> dict[str, Any]:
    health = httpx.get(f"{base}/healthz", timeout=5).json()
    workers = health.get("engine", {}).get("workers", [])
    return workers[0] if workers else {}


def run_qassist(model: Path, args: argparse.Namespace, logs: Path) -> list[RunResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="qassist-bench-") as tmp:
        workdir = Path(tmp)
        env = qassist_env(workdir, model, args)
        subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
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
        worker = [PYTHON, "manage.py", "run_inference_worker"]
        with (
            process(worker, env, logs / "worker.log") as worker_proc,
            process(daphne, env, logs / "web.log") as web,
        ):
            wait_http(f"{base}/healthz", 120, web, logs / "web.log")

            def make_client(prompts: list[str]):
                return ws_client(ws_url, base, cookie, prompts)

            asyncio.run(closed_loop(make_client, 1, 1))  # warm up
            for c in args.concurrency:
                before = worker_stats(base)
                cpu_before = {p.pid: cpu_seconds(p.pid) for p in (worker_proc, web)}
                wall, requests = asyncio.run(closed_loop(make_client, c, args.requests_per_client))
                cpu = {pid: cpu_seconds(pid) - t for pid, t in cpu_before.items()}
                after = worker_stats(base)
                step = after.get("step_seconds", 0) - before.get("step_seconds", 0)
                decode = after.get("decode_seconds", 0) - before.get("decode_seconds", 0)
                overhead = 1 - decode / step if step > 0 else None
                results.append(RunResult("qassist", c, wall, requests, overhead))
                results[-1].prefilled = int(after.get("prefill_tokens", 0)) - int(
                    before.get("prefill_tokens", 0)
                )
                results[-1].generated = int(after.get("generated_tokens", 0)) - int(
                    before.get("generated_tokens", 0)
                )
                results[-1].decode_seconds = decode
                results[-1].cpu_share = {
                    "worker": cpu[worker_proc.pid] / wall,
                    "web": cpu[web.pid] / wall,
                }
                print_row(results[-1])
    return results


# --- (d) llama-server -------------------------------------------------------------------------


async def http_client(url: str, prompts: list[str], max_tokens: int) -> list[RequestResult]:
    results = []
    # A fresh connection per request: llama-server closes a streamed response's connection.
    for prompt in prompts:
        async with httpx.AsyncClient(timeout=600) as client:
            sent = time.perf_counter()
            first = None
            tokens = 0
            body = {
                "messages": [{"role": "user", "content": prompt}],
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
                    if choices and choices[0].get("delta", {}).get("content") and first is None:
                        first = time.perf_counter()
            end = time.perf_counter()
            results.append(RequestResult(tokens, (first or end) - sent, end - sent))
    return results


def run_llama_server(
    binary: Path, model: Path, args: argparse.Namespace, logs: Path
) -> list[RunResult]:
    port = free_port()
    cmd = [
        str(binary), "-m", str(model), "--port", str(port), "--host", "127.0.0.1",
        "-np", str(args.parallel), "-c", str(args.parallel * 1024), "-t", str(args.threads),
        "-tb", str(args.threads), "--no-webui", *args.server_args.split(),
    ]  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    results = []
    with process(cmd, env, logs / "llama-server.log") as server:
        wait_http(f"http://127.0.0.1:{port}/health", 120, server, logs / "llama-server.log")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"

        def make_client(prompts: list[str]):
            return http_client(url, prompts, args.max_tokens)

        asyncio.run(closed_loop(make_client, 1, 1))  # warm up
        for c in args.concurrency:
            wall, requests = asyncio.run(closed_loop(make_client, c, args.requests_per_client))
            name = f"llama-server -np {args.parallel} {args.server_args}".strip()
            results.append(RunResult(name, c, wall, requests))
            print_row(results[-1])
    return results


# --- report -----------------------------------------------------------------------------------


def print_row(r: RunResult) -> None:
    extra = f"  overhead {r.overhead_share:.1%}" if r.overhead_share is not None else ""
    if r.cpu_share:
        extra += "  cores " + ", ".join(f"{k} {v:.2f}" for k, v in r.cpu_share.items())
    print(
        f"{r.system:28s} C={r.concurrency:<3d} {r.aggregate_tps:7.1f} tok/s  "
        f"TTFT p50 {r.ttft(0.5):5.2f} s p95 {r.ttft(0.95):5.2f} s  "
        f"per stream {r.stream_tps:5.1f} tok/s  errors {r.errors}{extra}",
        flush=True,
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def write_report(path: Path, args: argparse.Namespace, model: Path, serial: RunResult,
                 qassist: list[RunResult], ceiling: dict[int, float],
                 server: list[RunResult]) -> None:  # fmt: skip
    by_c = {r.concurrency: r for r in qassist}
    server_by_c = {r.concurrency: r for r in server}
    lines = [
        "# Benchmarks",
        "",
        f"Run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}.",
        f"Model `{model.name}`, {args.threads} threads, temperature 0, max_tokens "
        f"{args.max_tokens}, {args.requests_per_client} requests per client back to back, "
        f"qassist with {args.parallel} sequences and a {args.batch_tokens}-token step budget.",
        "",
        "Command:",
        "",
        "```",
        f"python -m bench.run --model {args.model} --concurrency "
        f"{','.join(map(str, args.concurrency))} --write",
        "```",
        "",
        "These machines are noisy: compare the ratios measured in the same run, not absolute "
        "numbers across runs.",
        "",
        "## Aggregate tokens/s, time to first token, per-stream speed",
        "",
        "| system | C | tokens/s | TTFT p50 | TTFT p95 | per stream tok/s | errors |",
        "|---|---|---|---|---|---|---|",
        f"| (a) serial llama-cpp-python | 1 | {serial.aggregate_tps:.1f} | "
        f"{serial.ttft(0.5):.2f} s | {serial.ttft(0.95):.2f} s | {serial.stream_tps:.1f} | "
        f"{serial.errors} |",
    ]
    for r in qassist + server:
        lines.append(
            f"| ({'b' if r.system == 'qassist' else 'd'}) {r.system} | {r.concurrency} | "
            f"{r.aggregate_tps:.1f} | {r.ttft(0.5):.2f} s | {r.ttft(0.95):.2f} s | "
            f"{r.stream_tps:.1f} | {r.errors} |"
        )
    for c, tps in ceiling.items():
        lines.append(f"| (c) raw batched decode | {c} | {tps:.1f} | — | — | {tps / c:.1f} | — |")
    lines += [
        "",
        "## Ratios (same run)",
        "",
        "| C | qassist / serial (b/a) | qassist / ceiling (b/c) | qassist / llama-server (b/d) "
        "| engine overhead outside llama_decode | cores used: worker / web |",
        "|---|---|---|---|---|---|",
    ]
    for c in args.concurrency:
        b = by_c.get(c)
        if b is None:
            continue
        ba = b.aggregate_tps / serial.aggregate_tps if serial.aggregate_tps else float("nan")
        bc = b.aggregate_tps / ceiling[c] if ceiling.get(c) else float("nan")
        d = server_by_c.get(c)
        bd = f"{b.aggregate_tps / d.aggregate_tps:.2f}" if d and d.aggregate_tps else "—"
        overhead = f"{b.overhead_share:.1%}" if b.overhead_share is not None else "—"
        cores = f"{b.cpu_share['worker']:.2f} / {b.cpu_share['web']:.2f}" if b.cpu_share else "—"
        lines.append(f"| {c} | {ba:.2f} | {bc:.0%} | {bd} | {overhead} | {cores} |")
    lines += [
        "",
        "- (a) one request at a time through `llama_cpp.Llama.create_chat_completion(stream=True)`;"
        " its tokens are the reply re-tokenised.",
        "- (b) C websocket clients → daphne → chat consumer (stores every reply) → Redis → "
        "`run_inference_worker`; tokens are the engine's completion counts.",
        "- (c) C sequences decoded together with `llama_decode` from Python, greedy, decode "
        "phase only: the ceiling.",
        "- (d) llama.cpp's `llama-server` built from the same llama.cpp sources "
        "(`bench/build_llama_server.sh`), OpenAI streaming API.",
        "- Engine overhead: the share of engine step time spent outside `llama_decode` "
        "(scheduling, sampling, detokenising, publishing), from the worker's counters.",
        "",
    ]
    # Hand-written notes after the generated part survive a new run.
    notes = ""
    if path.exists() and NOTES_HEADING in path.read_text():
        notes = path.read_text().split(NOTES_HEADING, 1)[1]
    path.write_text("\n".join(lines) + (NOTES_HEADING + notes if notes else ""))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--concurrency", default="1,4,8,16", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--serial-requests", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument(
        "--context-size", type=int, default=0, help="KV cells (default 1024 a sequence)"
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"
    )
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument(
        "--server-args", default="", help="more llama-server flags, e.g. --kv-unified"
    )
    parser.add_argument(
        "--skip", default="", help="comma list of: serial, qassist, ceiling, server"
    )
    parser.add_argument("--write", action="store_true", help="rewrite docs/BENCHMARKS.md")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    from inference import modelstore

    model = modelstore.resolve_model_path(args.model, ROOT / "models")
    if not model.is_file():
        sys.exit(f"{model} is missing: run `python manage.py fetch_model {args.model}`")
    logs = ROOT / "bench" / "results"
    logs.mkdir(parents=True, exist_ok=True)
    print(f"model {model.name}, {args.threads} threads, {machine()}", flush=True)

    serial = RunResult("serial llama-cpp-python", 1, 0.0)
    if "serial" not in skip:
        serial = run_serial(
            model, requests=args.serial_requests, max_tokens=args.max_tokens, threads=args.threads
        )
        print_row(serial)
    qassist = [] if "qassist" in skip else run_qassist(model, args, logs)
    ceiling: dict[int, float] = {}
    if "ceiling" not in skip:
        for c in args.concurrency:
            ceiling[c] = batched_decode_tokens_per_second(
                model, concurrency=c, prompts=PROMPTS, steps=args.max_tokens, threads=args.threads
            )
            print(f"{'raw batched decode':28s} C={c:<3d} {ceiling[c]:7.1f} tok/s", flush=True)
    if "ceiling" not in skip and qassist:
        # The ceiling: raw decode time for the tokens generated (at the run's C) plus
        # raw prefill time for the prompt tokens computed, against qassist's wall time.
        prefill_tps = prefill_tokens_per_second(model, prompts=PROMPTS, threads=args.threads)
        print(f"{'raw prefill (chat prompts)':28s} {prefill_tps:7.1f} tok/s", flush=True)
        for r in qassist:
            if r.concurrency not in ceiling:
                continue
            decode_s = r.generated / ceiling[r.concurrency]
            prefill_s = r.prefilled / prefill_tps
            print(
                f"ceiling C={r.concurrency:<3d} {r.generated} tokens generated, {r.prefilled} "
                f"prompt tokens computed: {decode_s:.1f} s + {prefill_s:.1f} s = "
                f"{decode_s + prefill_s:.1f} s; qassist wall {r.wall:.1f} s "
                f"({r.wall / (decode_s + prefill_s):.2f}x), inside llama_decode "
                f"{r.decode_seconds:.1f} s ({r.decode_seconds / (decode_s + prefill_s):.2f}x)",
                flush=True,
            )
    server: list[RunResult] = []
    binary = args.llama_server
    if binary is None:
        found = sorted(Path.home().glob(".cache/qassist/llama-server-*/bin/llama-server"))
        binary = found[-1] if found else None
    if "server" not in skip and binary is not None and shutil.which(str(binary)):
        server = run_llama_server(binary, model, args, logs)
    if args.write:
        write_report(ROOT / "docs" / "BENCHMARKS.md", args, model, serial, qassist, ceiling, server)
        print("wrote docs/BENCHMARKS.md")


if __name__ == "__main__":
    main()
