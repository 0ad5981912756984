"""Does a reply keep its language? (issue #31, point 3)

    python -m bench.language --model qwen2.5-coder-0.5b [--half report|tune|all]
        [--out bench/results/language.json]

The rag_eval handbook (bench/rag_eval/data, indexed as the product indexes it) and chat turns
prepared as the product prepares them (chat.services.turns, with a member's custom
instructions), answered by the model through the product's engine (greedy, 200 tokens), twice:
`before` with QASSIST_REPLY_LANGUAGE off (the instructions only as a system message), `after`
with it on (the directive after each question; where the language is at risk, the reply begun
unseen with a sentence in its language, its start judged as chat.reply_language judges it
while it streams, and a reply that starts in another language asked once more, insisting).
Greedy decoding makes the emulation exact: the held start of a live reply is the start of the
reply generated here.

Cases, drawn deterministically from bench/rag_eval/data/questions.jsonl (never the `fresh`
split, whose replies stay unread) — first questions only, no follow-ups:
- instructed: English questions with "Always answer in French." (12) or "Antworte immer auf
  Deutsch." (6) or "请始终用中文回答。" (6); Chinese questions with "Always answer in English."
  (6);
- cross-language: questions whose passages are in the other language, no instructions (12);
- tasks: writing and general requests, no instructions (8), and with "Always answer in
  French." (4).

The directives' wording (chat.reply_language) was tuned on the `tune` half (every other case
of each kind); the figures to report are the held-out `report` half's, the default.

A reply holds its language when no sentence of it (of 20 letters or more) is judged to be in
another (chat.language.in_language); a reply too short to judge is counted apart. Also
reported: the expected fact present (document questions), replies asked again, and how many
characters a held reply waited for before it showed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.rag_eval.__main__ import Answerer, has_fact, index_corpus, load_questions, setup_django

FRENCH = "Always answer in French."
GERMAN = "Antworte immer auf Deutsch."
CHINESE = "请始终用中文回答。"
ENGLISH = "Always answer in English."
SENTENCE = re.compile(r"(?<=[.!?。！？])\s*|\n+")


@dataclass
class Case:
    id: str
    kind: str  # instructed, cross-language, task
    question: str
    instructions: str
    expected_facts: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    case: str
    kind: str
    run: str  # before, after
    expected: str = ""  # the language the reply must be in
    reply: str = ""
    first_reply: str = ""  # the reply that was asked again, when it was
    holds: bool | None = None  # None: too short to judge
    right: bool | None = None  # the expected fact is in the reply (document questions)
    held: bool = False  # its start was held back to judge
    held_chars: int = 0  # characters held before the verdict
    asked_again: bool = False


def cases() -> list[Case]:
    questions = [
        q
        for q in load_questions()
        if q["tenant"] == "acme" and q.get("split") != "fresh" and not q.get("follow_up_of")
    ]
    documented = [q for q in questions if q.get("answerable") and "task" not in q["tags"]]
    english = [q for q in documented if q["language"] == "en"]
    chinese = [q for q in documented if q["language"] == "zh"]
    crossed = [q for q in documented if "cross-language" in q["tags"]]
    tasks = [q for q in questions if "task" in q["tags"]]
    out: list[Case] = []

    def add(kind: str, picked: list[dict[str, Any]], instructions: str) -> None:
        for q in picked:
            key = f"{q['id']}:{kind}:{instructions[:6]}"
            out.append(Case(key, kind, q["question"], instructions, q.get("expected") or []))

    add("instructed", english[0:12], FRENCH)
    add("instructed", english[12:18], GERMAN)
    add("instructed", english[18:24], CHINESE)
    add("instructed", chinese[0:6], ENGLISH)
    add("cross-language", [q for q in crossed if q["language"] == "en"][:6], "")
    add("cross-language", [q for q in crossed if q["language"] == "zh"][:6], "")
    add("task", tasks[:8], "")
    add("task", tasks[8:12], FRENCH)
    return out


def half(picked: list[Case], which: str) -> list[Case]:
    """Every other case of each kind: `tune` the first of each pair, `report` the second."""
    if which == "all":
        return picked
    kept: list[Case] = []
    seen: dict[str, int] = {}
    for case in picked:
        n = seen[case.kind] = seen.get(case.kind, -1) + 1
        if (n % 2 == 0) == (which == "tune"):
            kept.append(case)
    return kept


def sentences_hold(text: str, expected: Any) -> bool | None:
    from chat.language import in_language

    verdicts = [in_language(s, expected) for s in SENTENCE.split(text) if s.strip()]
    if any(v is False for v in verdicts):
        return False
    whole = in_language(text, expected)
    if whole is False:
        return False
    return True if whole or any(verdicts) else None


def held_start(text: str) -> tuple[str, int]:
    """What the guard sees of a reply before it decides: its shortest judgeable start (the
    whole reply when none is)."""
    from chat.language import judgeable

    for end in range(1, len(text) + 1):
        if judgeable(text[:end]):
            return text[:end], end
    return text, len(text)


def run(answerer: Answerer, tenant: Any, picked: list[Case], label: str) -> list[Outcome]:
    from django.contrib.auth.models import User

    from chat.language import in_language
    from chat.reply_language import asked_again, first_asked
    from chat.services.instructions import custom_instructions_set
    from chat.services.turns import turn_prepare_send
    from inference.worker import Submission
    from tenants.models import Membership

    plans: dict[str, Any] = {}
    for case in picked:
        user = User.objects.create_user(f"l-{uuid.uuid4().hex[:10]}")
        Membership.objects.create(user=user, tenant=tenant)
        if case.instructions:
            custom_instructions_set(user=user, text=case.instructions)
        plans[case.id] = turn_prepare_send(
            user=user, tenant=tenant, session_id=None, content=case.question
        )
    direct = {k: p.conversation for k, p in plans.items() if p.canned_answer is None}
    # The requests as chat.replies sends them: first asked, then (if wrong) asked again.
    firsts = {k: first_asked(Submission(k, tuple(c)), plans[k].language) for k, c in direct.items()}
    replies = answerer.answer_all(direct, {k: s.params.reply_start for k, s in firsts.items()})
    again: dict[str, Submission] = {}
    outcomes: dict[str, Outcome] = {}
    for case in picked:
        plan = plans[case.id]
        language = plan.language
        reply = replies.get(case.id, plan.canned_answer or "")
        outcome = Outcome(case.id, case.kind, label, reply=reply)
        if language.hold and language.expected is not None and case.id in direct:
            start, held = held_start(reply)
            outcome.held, outcome.held_chars = True, held
            if in_language(start, language.expected) is False:
                outcome.asked_again = True
                again[case.id] = asked_again(firsts[case.id], language)
        outcomes[case.id] = outcome
    retried = answerer.answer_all(
        {k: list(s.messages) for k, s in again.items()},
        {k: s.params.reply_start for k, s in again.items()},
    )
    for key, text in retried.items():
        outcomes[key].first_reply, outcomes[key].reply = outcomes[key].reply, text
    from chat.language import named_language, question_language

    for case in picked:
        outcome = outcomes[case.id]
        expected = (  # as chat.reply_language decides it
            named_language(case.question)
            or named_language(case.instructions)
            or question_language(case.question)
        )
        outcome.expected = expected.name if expected is not None else ""
        outcome.holds = sentences_hold(outcome.reply, expected) if expected else None
        if case.expected_facts:
            outcome.right = has_fact(outcome.reply, case.expected_facts)
    return [outcomes[c.id] for c in picked]


def share(values: list[bool]) -> str:
    return f"{sum(values) / len(values):.2f} ({sum(values)}/{len(values)})" if values else "—"


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| cases | run | language held | too short to judge | expected fact present | "
        "asked again | held (replies) | characters held p50 / max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    kinds = ["instructed", "cross-language", "task", "all"]
    for kind in kinds:
        for label in ("before", "after"):
            rows = [o for o in outcomes if o.run == label and (kind == "all" or o.kind == kind)]
            judged = [bool(o.holds) for o in rows if o.holds is not None]
            facts = [bool(o.right) for o in rows if o.right is not None]
            held = [o.held_chars for o in rows if o.held]
            chars = f"{statistics.median(held):.0f} / {max(held)}" if held else "—"
            lines.append(
                f"| {kind} ({len(rows)}) | {label} | {share(judged)} | "
                f"{sum(o.holds is None for o in rows)} | {share(facts)} | "
                f"{sum(o.asked_again for o in rows)} | {len(held)} | {chars} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--out", type=Path, default=Path("bench/results/language.json"))
    parser.add_argument(
        "--half",
        choices=("tune", "report", "all"),
        default="report",
        help="the cases to run: the half the directives were tuned on, the held-out half "
        "(the default: the figures to report) or both",
    )
    parser.add_argument(
        "--runs", default="before,after", help="before (the check off), after (on), or both"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qassist-language-") as tmp:
        setup_django(Path(tmp))
        from django.conf import settings

        tenants = index_corpus()["tenants"]
        picked = half(cases(), args.half)
        answerer = Answerer(args.model)
        outcomes: list[Outcome] = []
        try:
            for label, on in (("before", False), ("after", True)):
                if label not in args.runs.split(","):
                    continue
                settings.QASSIST_REPLY_LANGUAGE = on
                started = time.perf_counter()
                outcomes += run(answerer, tenants["acme"], picked, label)
                print(f"{label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        finally:
            answerer.close()
    print(f"\n{args.model}, {len(picked)} cases\n")
    print(table(outcomes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([asdict(o) for o in outcomes], ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
