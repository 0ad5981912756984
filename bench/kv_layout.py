"""llama.cpp's two KV layouts, measured with `llama_decode` directly (docs/engine.md, "KV memory").

    python -m bench.kv_layout                  # both layouts, qwen2.5-coder-0.5b
    python -m bench.kv_layout --history 400 --sequences 48

- **decode**: `--sequences` sequences hold `--history` tokens each (distinct tokens, nothing
  shared); then steps decode one token for some of them: 16 with consecutive ids, 16 at every
  other id, 16 in two runs, all of them, all but one, and 16 beside a 256-token prompt chunk.
- **burst**: a 390-token prefix (a tenant's system prompt) is copied into 15 sequences, then 15
  new prompts are computed in one `llama_decode`: all of 25 tokens, or of 21-30 tokens in
  ascending, descending and shuffled order of sequence ids.

Unified: one pool of cells (`kv_unified = true`, qassist's default). Streams: a stream of
`--cells-per-sequence` cells per sequence (`QASSIST_KV_UNIFIED=0`); copies go through
`llama_state_seq_get_data` / `set_data`, as the runner does. Each figure is the median of
`--repeat` steps, in milliseconds. Nothing else should run on the cores meanwhile.
"""

from __future__ import annotations

import argparse
import ctypes
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from inference import modelstore

Item = tuple[int, int, int, bool]  # token, position, sequence, wants logits


class Context:
    def __init__(self, model: Path, *, unified: bool, sequences: int, cells: int, threads: int):
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(
            str(model).encode(), llama_cpp.llama_model_default_params()
        )
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = sequences * cells
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = unified
        self.unified = unified
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(2048, 0, 1)

    def decode(self, items: list[Item]) -> float:
        batch = self.batch
        batch.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        started = time.perf_counter()
        if llama_cpp.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - started

    def fill(self, seq: int, tokens: list[int], start: int = 0) -> None:
        for a in range(0, len(tokens), 512):
            chunk = tokens[a : a + 512]
            self.decode([(t, start + a + i, seq, False) for i, t in enumerate(chunk)])

    def clear(self, seq: int, keep: int = 0) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq, keep, -1)

    def copy(self, source: int, target: int, n: int) -> None:
        """`target` gets `source`'s first `n` positions, as the runner copies a prefix."""
        self.clear(target)
        if self.unified:
            llama_cpp.llama_memory_seq_cp(self.memory, source, target, 0, n)
            return
        size = llama_cpp.llama_state_seq_get_size(self.ctx, source)
        blob = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self.ctx, blob, size, source)
        llama_cpp.llama_state_seq_set_data(self.ctx, blob, written, target)
        self.clear(target, n)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


def median_ms(run: Callable[[], float], repeat: int) -> float:
    return 1000 * statistics.median(run() for _ in range(repeat))


def decode_steps(c: Context, args: argparse.Namespace) -> dict[str, float]:
    n, history = args.sequences, args.history
    for seq in range(n):
        c.fill(seq, [100 + (i * 7 + seq) % 5000 for i in range(history)])
    pos = dict.fromkeys(range(n), history)

    def step(seqs: list[int], prompt: int = 0) -> Callable[[], float]:
        def run() -> float:
            items: list[Item] = [(300 + s, pos[s], s, True) for s in seqs]
            if prompt:  # a new conversation's prompt chunk in the last sequence
                last = n - 1
                c.clear(last)
                items += [(500 + i, i, last, i == prompt - 1) for i in range(prompt)]
            seconds = c.decode(items)
            for s in seqs:
                pos[s] += 1
            return seconds

        return run

    sixteen = list(range(16))
    return {
        "16 decode, ids 0-15": median_ms(step(sixteen), args.repeat),
        "16 decode, every other id": median_ms(step(list(range(0, 32, 2))), args.repeat),
        "16 decode, two runs of 8": median_ms(
            step(list(range(8)) + list(range(20, 28))), args.repeat
        ),
        f"{n - 1} decode, ids in a row": median_ms(step(list(range(n - 1))), args.repeat),
        f"{n - 2} decode, one idle id among them": median_ms(
            step([s for s in range(n - 1) if s != n // 2]), args.repeat
        ),
        "16 decode + a 256-token prompt chunk": median_ms(step(sixteen, 256), args.repeat),
    }


def burst(c: Context, args: argparse.Namespace) -> dict[str, float]:
    prefix = 390
    c.fill(0, [100 + i for i in range(prefix)])
    rng = random.Random(1)
    mixed = [rng.randint(21, 30) for _ in range(15)]

    def prompts(lengths: list[int]) -> Callable[[], float]:
        def run() -> float:
            for seq, _ in enumerate(lengths, start=1):
                c.copy(0, seq, prefix)
            items: list[Item] = [
                (200 + j, prefix + j, seq, j == n - 1)
                for seq, n in enumerate(lengths, start=1)
                for j in range(n)
            ]
            return c.decode(items)

        return run

    return {
        "15 prompts of 25 tokens": median_ms(prompts([25] * 15), args.repeat),
        "15 prompts of 21-30 tokens, shuffled ids": median_ms(prompts(mixed), args.repeat),
        "15 prompts of 21-30, longest first": median_ms(
            prompts(sorted(mixed, reverse=True)), args.repeat
        ),
        "15 prompts of 21-30, shortest first": median_ms(prompts(sorted(mixed)), args.repeat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--sequences", type=int, default=48)
    parser.add_argument("--history", type=int, default=400)
    parser.add_argument("--cells-per-sequence", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    model = modelstore.resolve_model_path(
        args.model, Path(__file__).resolve().parents[1] / "models"
    )
    results: dict[str, dict[str, float]] = {}
    for layout, unified in (("pool", True), ("streams", False)):
        for name, measure in (("decode", decode_steps), ("burst", burst)):
            c = Context(
                model,
                unified=unified,
                sequences=args.sequences,
                cells=args.cells_per_sequence,
                threads=args.threads,
            )
            try:
                for step, ms in measure(c, args).items():
                    results.setdefault(f"{name}: {step}", {})[layout] = ms
            finally:
                c.close()
    print(f"| step ({args.sequences} sequences, {args.history} tokens each) | pool | streams |")
    print("|---|---|---|")
    for step, by_layout in results.items():
        print(f"| {step} | {by_layout['pool']:.0f} ms | {by_layout['streams']:.0f} ms |")


if __name__ == "__main__":
    main()
