"""The capacity bench's results (bench/capacity.py, issue #35): a level's figures from its
answers, the markdown table, the headline (employees served) and the plot."""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.company import loadavg

if TYPE_CHECKING:
    from bench.capacity import Answer

SERVED_AT = 0.95  # goodput a level must reach to count as served (its p95 meets the level)


# --- results -----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


@dataclass
class Level:
    system: str
    mix: str
    employees: int
    window: float
    offered: int = 0
    answered: int = 0
    refused: int = 0
    errors: int = 0
    without_model: int = 0  # answered by qassist without the model (not replayed)
    ttft_p50: float = float("nan")
    ttft_p95: float = float("nan")
    ttft_p99: float = float("nan")
    stream_median: float = float("nan")
    goodput: float = 0.0
    cache_share: float | None = None  # prompt tokens not computed (the worker's counters)
    placed_share: float | None = None  # passage tokens placed from precomputed KV
    prompt_computed_per_question: float | None = None
    right: int | None = None  # knowledge: answers naming the expected figure
    checked: int = 0
    told: int = 0  # measured questions told an estimated wait
    told_error_p50: float | None = None  # (wait that followed) - (estimate), seconds
    told_error_abs_p50: float | None = None
    # Each told question: [seconds after sending it was told, the estimate, the wait that followed]
    told_waits: list[list[float]] = field(default_factory=list)
    load: str = ""
    worker: dict[str, Any] = field(default_factory=dict)

    @property
    def served(self) -> bool:
        return self.goodput >= SERVED_AT


def summarize(
    system: str,
    mix: str,
    employees: int,
    window: float,
    answers: list[Answer],
    args: argparse.Namespace,
    worker: dict[str, Any] | None = None,
) -> Level:
    measured = [a for a in answers if a.arrival.measured]
    ok = [a for a in measured if a.ok]
    level = Level(system, mix, employees, window, offered=len(measured), answered=len(ok))
    level.refused = sum(a.refused for a in measured)
    level.errors = len(measured) - len(ok) - level.refused
    level.without_model = sum(a.ok and a.prompt_tokens == 0 for a in measured)
    ttfts = [a.ttft for a in ok]
    level.ttft_p50, level.ttft_p95, level.ttft_p99 = (pct(ttfts, q) for q in (0.5, 0.95, 0.99))
    speeds = [a.stream_tps for a in ok if a.stream_tps > 0]
    level.stream_median = statistics.median(speeds) if speeds else float("nan")
    within = sum(a.within(args.slo_ttft, args.slo_speed) for a in measured)
    level.goodput = within / len(measured) if measured else 0.0
    expected = [a for a in ok if a.arrival.question.answer]
    if expected:
        level.checked = len(expected)
        level.right = sum(a.arrival.question.answer.lower() in a.text.lower() for a in expected)
    told = [(a.ttft - a.told[0]) - a.told[1] for a in ok if a.told is not None]
    level.told = len(told)
    level.told_waits = [
        [round(a.told[0], 2), a.told[1], round(a.ttft - a.told[0], 2)]
        for a in ok
        if a.told is not None
    ]
    if told:
        level.told_error_p50 = round(statistics.median(told), 2)
        level.told_error_abs_p50 = round(statistics.median(abs(x) for x in told), 2)
    if worker:
        level.worker = worker
        computed = worker.get("prefill_tokens", 0)
        cached = worker.get("cached_tokens", 0)
        if computed + cached:
            level.cache_share = round(cached / (computed + cached), 3)
        placed, missed = worker.get("placed_tokens", 0), worker.get("passage_tokens_computed", 0)
        if placed + missed:
            level.placed_share = round(placed / (placed + missed), 3)
        if measured:
            level.prompt_computed_per_question = round(computed / len(measured), 1)
    level.load = loadavg()
    return level


def table(levels: list[Level]) -> str:
    lines = [
        "| system | mix | employees | offered / answered per min | TTFT p50 / p95 / p99 | "
        "stream median tok/s | refused (errors) | goodput | prompt tokens from cache | passage "
        "tokens placed | computed per question | right | told wait: error p50 (abs) | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in sorted(levels, key=lambda v: (v.mix, v.employees, v.system)):
        per_min = 60.0 / v.window
        share = f"{v.cache_share:.0%}" if v.cache_share is not None else "—"
        placed = f"{v.placed_share:.0%}" if v.placed_share is not None else "—"
        computed = (
            f"{v.prompt_computed_per_question:.0f}" if v.prompt_computed_per_question else "—"
        )
        right = f"{v.right}/{v.checked}" if v.right is not None else "—"
        told = (
            f"{v.told_error_p50:+.1f} s ({v.told_error_abs_p50:.1f}), {v.told} told"
            if v.told_error_p50 is not None
            else "—"
        )
        lines.append(
            f"| {v.system} | {v.mix} | {v.employees} | {v.offered * per_min:.1f} / "
            f"{v.answered * per_min:.1f} | {v.ttft_p50:.2f} / {v.ttft_p95:.2f} / "
            f"{v.ttft_p99:.2f} s | {v.stream_median:.1f} | {v.refused} ({v.errors}) | "
            f"**{v.goodput:.2f}** | {share} | {placed} | {computed} | {right} | {told} | "
            f"{v.load} |"
        )
    return "\n".join(lines)


def headline(levels: list[Level]) -> str:
    out = []
    for system in sorted({(v.system, v.mix) for v in levels}):
        served = [v.employees for v in levels if (v.system, v.mix) == system and v.served]
        tried = sorted(v.employees for v in levels if (v.system, v.mix) == system)
        most = max(served, default=0)
        out.append(
            f"{system[0]}, {system[1]} mix: {most or 'fewer than ' + str(tried[0])} employees "
            f"served at one question per 3 minutes (levels tried: {tried})"
        )
    return "\n".join(out)


# --- the plot ----------------------------------------------------------------------------------


def plot(paths: list[Path], out: Path) -> None:
    import matplotlib  # bench-only: pip install matplotlib (PyPI)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [Level(**{k: v for k, v in item.items() if k in Level.__dataclass_fields__})
              for path in paths for item in json.loads(path.read_text())["levels"]]  # fmt: skip
    fig, (ttft, good) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system, mix in sorted({(v.system, v.mix) for v in levels}):
        mine = sorted((v for v in levels if (v.system, v.mix) == (system, mix)),
                      key=lambda v: v.employees)  # fmt: skip
        x = [v.employees for v in mine]
        label = f"{system} ({mix})"
        ttft.plot(x, [v.ttft_p95 for v in mine], marker="o", label=label)
        good.plot(x, [v.goodput for v in mine], marker="o", label=label)
    ttft.axhline(3.0, color="grey", linestyle="--", linewidth=1)
    good.axhline(SERVED_AT, color="grey", linestyle="--", linewidth=1)
    ttft.set(xlabel="employees (one question per 3 minutes each)", ylabel="TTFT p95 (s)",
             yscale="log", title="Time to first word, p95")  # fmt: skip
    good.set(xlabel="employees (one question per 3 minutes each)", ylim=(0, 1.05),
             ylabel="share within TTFT ≤ 3 s and ≥ 5 tokens/s", title="Goodput")  # fmt: skip
    good.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
