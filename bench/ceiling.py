"""The raw ceiling: llama.cpp batched greedy decode from Python, no server, no scheduler.

C sequences, each prefilled with its chat prompt, then decoded together one token each per
`llama_decode` for a fixed number of steps. Only the decode phase is timed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from inference.runner import LlamaRunner
from inference.scheduler import DecodeItem, KvAction, KvOp, PrefillChunk, SchedulerOutput
from inference.types import ChatMessage, Request, SamplingParams


def batched_decode_tokens_per_second(
    model: Path, *, concurrency: int, prompts: list[str], steps: int, threads: int
) -> float:
    runner = LlamaRunner(
        model,
        n_seq_max=concurrency,
        n_ctx=concurrency * (steps + 256),
        max_batch_tokens=512,
        n_threads=threads,
        max_seq_tokens=steps + 256,
        # A stream per sequence: the faster raw decode of C sequences in lockstep (194 against
        # about 170 tokens/s for the unified pool at C = 50), so the stricter ceiling.
        kv_unified=False,
    )
    try:
        greedy = SamplingParams(temperature=0, max_tokens=steps)
        requests = []
        for i in range(concurrency):
            parts = runner.render_prompt([ChatMessage("user", prompts[i % len(prompts)])])
            tokens = runner.tokenize_parts(parts)
            request = Request(f"c{i}", tokens, greedy, seq_id=i)
            requests.append(request)
            sampled = runner.execute(
                SchedulerOutput(prefills=[PrefillChunk(request, i, 0, tokens)])
            )
            request.output_tokens.append(sampled[request.request_id])
        started = time.perf_counter()
        for _ in range(steps):
            out = SchedulerOutput(
                decodes=[
                    DecodeItem(r, r.seq_id or 0, r.output_tokens[-1], r.num_tokens - 1)
                    for r in requests
                ]
            )
            sampled = runner.execute(out)
            for r in requests:
                r.output_tokens.append(sampled[r.request_id])
        elapsed = time.perf_counter() - started
        return concurrency * steps / elapsed
    finally:
        runner.close()


def prefill_tokens_per_second(
    model: Path, *, prompts: list[str], threads: int, chunk: int = 256, rounds: int = 4
) -> float:
    """Raw prompt computation as a served workload has it: the chat prompts, each in its own
    sequence from position 0, packed into batches of up to `chunk` tokens (qassist's step
    budget), `rounds` times over (the cells cleared in between), timed."""
    n = len(prompts)
    runner = LlamaRunner(
        model,
        n_seq_max=n,
        n_ctx=n * 512,
        max_batch_tokens=chunk,
        n_threads=threads,
        max_seq_tokens=512,
    )
    try:
        greedy = SamplingParams(temperature=0, max_tokens=1)
        requests = []
        for i, text in enumerate(prompts):
            tokens = runner.tokenize_parts(runner.render_prompt([ChatMessage("user", text)]))
            requests.append(Request(f"p{i}", tokens, greedy, seq_id=i))
        batches: list[list[PrefillChunk]] = [[]]
        room = chunk
        for r in requests:
            start = 0
            while start < len(r.prompt_tokens):
                if room == 0:
                    batches.append([])
                    room = chunk
                piece = r.prompt_tokens[start : start + room]
                batches[-1].append(PrefillChunk(r, r.seq_id or 0, start, piece))
                start += len(piece)
                room -= len(piece)
        clear = [KvOp(r.seq_id or 0, 0) for r in requests]
        elapsed = 0.0
        for round_ in range(rounds + 1):  # the first round warms up
            runner.execute(SchedulerOutput(kv_ops=list[KvAction](clear)))
            started = time.perf_counter()
            for batch in batches:
                runner.execute(SchedulerOutput(prefills=batch))
            if round_:
                elapsed += time.perf_counter() - started
        return rounds * sum(len(r.prompt_tokens) for r in requests) / elapsed
    finally:
        runner.close()


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    from bench.prompts import PROMPTS

    for c in (1, 4, 8, 16):
        tps = batched_decode_tokens_per_second(
            Path(sys.argv[1]), concurrency=c, prompts=PROMPTS, steps=128, threads=2
        )
        print(c, round(tps, 1), np.round(tps / c, 1))
