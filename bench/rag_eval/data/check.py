"""Validate questions.jsonl against the corpus, and give new questions their half of the split.

    python -m bench.rag_eval.data.check                  # validate; exit 1 on any error
    python -m bench.rag_eval.data.check --assign-splits  # give questions without a split one

Run from the repository root with the project's virtualenv: evidence is compared with the text
the product's own parsers (knowledge.parsers) extract, because that is the text a quote is cut
from. The checks, in README.md's words:

- every line is one JSON object, ids are unique, fields have their types;
- every question is in one split: `tune`, `held_out` (the two halves) or `fresh` (written after
  the held-out half had been read; never tuned on, never moved);
- a follow-up's parent exists, comes before it, is a first question (no chains: the bench asks
  all first questions, then all follow-ups), is asked by the same tenant and is in the same split;
- an answerable question's `evidence` is verbatim in one sentence (as knowledge.chunking cuts
  them) of one block of its source's extracted text, under its `section` (for the PDF: on that
  page), and its first expected fact is in the evidence after the bench's normalisation (the
  other facts are variants: other units, languages, forms);
- an unanswerable question's `distractor` (the neighbouring passage a model borrows from) is
  verbatim in its `distractor_source`;
- the tags agree with the fields (`follow-up`, `unanswerable`, `cross-language`, `task`, `leak`);
- leak terms occur in no acme document and in no question;
- the halves are balanced in every stratum (printed as a table, with the fresh split beside
  them; the fresh split is not balanced against them).

A section that the parser is known to file under another heading (MISFILED) is a warning, not
an error: the data are right, the citation the product shows would be wrong.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.rag_eval.__main__ import SPLITS, normalise
from knowledge.chunking import _SENTENCE_END
from knowledge.parsers import Block, detect, parse

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "questions.jsonl"
TENANTS = ("acme", "globex")
# SPLITS: the two halves that --assign-splits balances, and the fresh split: written on
# 2026-12-03 after the held-out half had been read, reported and never tuned on. It is fixed in
# the file: no assignment moves a fresh question or deals a new one into it.
HALVES = ("tune", "held_out")
FRESH = "fresh"
assert (*HALVES, FRESH) == SPLITS
LANGUAGES = ("en", "zh")
TAGS = {"paraphrase", "cross-language", "follow-up", "unanswerable", "leak", "task"}
# Tags for the kind of passage an answerable question's fact sits in; for reporting only.
SHAPE_TAGS = {"table", "list", "procedure", "general-rule"}
# A full stop after these is no sentence end (the PDF's limits table: "Class A city (e.g. London").
ABBREVIATIONS = ("e.g.", "i.e.", "max.", "approx.", "No.")
# Sections the product's parser files under a wrong heading: a warning, so the data stay right
# and the product's fault stays visible. knowledge/parsers/text.py takes the wrapped list item
# "1. 北风机器人在 B2 停车场租有 **20 个**固定员工车位…" (numbered, short, no final punctuation on
# its first line) for a level-1 heading that replaces "五、停车".
MISFILED = {("office-guide-shanghai.txt", "五、停车"): "1. 北风机器人在 B2 停车场租有"}
ID_PREFIXES = ("travel-", "it-", "leave-", "exp-", "onb-", "rw-", "sh-", "ben-", "sec-")
ID_PREFIXES_OTHER = ("globex-", "un-", "leak-", "task-")
DOCUMENT_LANGUAGE = {
    "travel-policy.md": "en",
    "it-security.html": "en",
    "leave-policy.docx": "en",
    "expenses.pdf": "en",
    "onboarding.md": "en",
    "remote-work.docx": "en",
    "office-guide-shanghai.txt": "zh",
    "员工手册-福利.md": "zh",
    "信息安全守则.html": "zh",
    "confidential-merger.md": "en",
}
FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "tenant": (str,),
    "question": (str,),
    "language": (str,),
    "expected": (list,),
    "source": (str, type(None)),
    "section": (str, type(None)),
    "answerable": (bool, type(None)),
    "follow_up_of": (str,),
    "evidence": (str,),
    "tags": (list,),
    "split": (str,),
    "note": (str,),
    "distractor_source": (str,),
    "distractor": (str,),
    "leak_terms": (list,),
}
REQUIRED = ["id", "tenant", "question", "language", "expected", "source", "section", "answerable"]
REQUIRED += ["tags", "split"]


@dataclass
class Report:
    errors: list[str]
    warnings: list[str]

    def error(self, qid: str, message: str) -> None:
        self.errors.append(f"{qid}: {message}")

    def warn(self, qid: str, message: str) -> None:
        self.warnings.append(f"{qid}: {message}")


def kind(q: dict[str, Any]) -> str:
    """answerable, unanswerable, leak or task: the question's category."""
    if q.get("answerable") is None:
        return "task"
    if q.get("leak_terms"):
        return "leak"
    return "answerable" if q["answerable"] else "unanswerable"


def load(path: Path) -> list[dict[str, Any]]:
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            raise SystemExit(f"{path.name}:{number}: an empty line")
        value = json.loads(line)
        if not isinstance(value, dict):
            raise SystemExit(f"{path.name}:{number}: not a JSON object")
        questions.append(value)
    return questions


def documents() -> dict[tuple[str, str], list[Block]]:
    """The extracted blocks of every document, by (tenant, file name)."""
    blocks = {}
    for tenant in TENANTS:
        for path in sorted((HERE / tenant).iterdir()):
            data = path.read_bytes()
            blocks[tenant, path.name] = parse(data, detect(data, path.name)).blocks
    return blocks


def find(blocks: list[Block], text: str) -> list[Block]:
    return [b for b in blocks if not b.heading and text in b.text]


def sentences(text: str) -> list[str]:
    """The block's sentences where the product cuts them (knowledge.chunking: after . ! ? and
    a space, after 。！？；), so evidence never spans two and a sentence-long quote can hold it."""
    out, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if not text[: match.start()].endswith(ABBREVIATIONS):
            out.append(text[start : match.start()])
            start = match.end()
    return [*out, text[start:]]


def check_fields(q: dict[str, Any], report: Report) -> None:
    qid = q.get("id", "?")
    for name in REQUIRED:
        if name not in q:
            report.error(qid, f"no `{name}`")
    for name, value in q.items():
        if name not in FIELDS:
            report.error(qid, f"unknown field `{name}`")
        elif not isinstance(value, FIELDS[name]):
            report.error(qid, f"`{name}` is {type(value).__name__}")
    if q.get("tenant") not in TENANTS:
        report.error(qid, f"tenant {q.get('tenant')!r}")
    if q.get("language") not in LANGUAGES:
        report.error(qid, f"language {q.get('language')!r}")
    if q.get("split") not in SPLITS:
        report.error(qid, f"split {q.get('split')!r}")
    if not str(qid).startswith(ID_PREFIXES + ID_PREFIXES_OTHER):
        report.error(qid, "the id has no known prefix")
    for tag in q.get("tags", []):
        if tag not in TAGS | SHAPE_TAGS:
            report.error(qid, f"unknown tag {tag!r}")
    for name in ("expected", "leak_terms", "tags"):
        if not all(isinstance(x, str) and x for x in q.get(name, [])):
            report.error(qid, f"`{name}` holds something other than non-empty strings")


def check_answerable(
    q: dict[str, Any], docs: dict[tuple[str, str], list[Block]], report: Report
) -> None:
    qid, source, section = q["id"], q["source"], q["section"]
    blocks = docs.get((q["tenant"], source))
    if blocks is None:
        report.error(qid, f"source {source!r} is no document of {q['tenant']}")
        return
    if not q["expected"]:
        report.error(qid, "answerable without expected facts")
    evidence = q.get("evidence")
    if not evidence:
        report.error(qid, "answerable without evidence")
        return
    holding = find(blocks, evidence)
    if not holding:
        report.error(qid, f"evidence not verbatim in {source}'s extracted text: {evidence!r}")
        return
    if not any(evidence in sentence for b in holding for sentence in sentences(b.text)):
        report.error(qid, f"evidence spans more than one sentence: {evidence!r}")
    if q["expected"] and normalise(q["expected"][0]) not in normalise(evidence):
        report.error(qid, f"first expected fact {q['expected'][0]!r} not in the evidence")
    if not isinstance(section, str):
        report.error(qid, "answerable without section")
    elif section.startswith("page "):
        if not any(f"page {b.page}" == section for b in holding):
            pages = sorted({b.page for b in holding if b.page is not None})
            report.error(qid, f"evidence is on page(s) {pages}, not {section}")
    # Compared normalised: the parser turns the ideographic space of "第一章　数据分级" into a
    # space, as the bench's normalisation does.
    elif not any(normalise(section) in map(normalise, b.headings) for b in holding):
        paths = {" > ".join(b.headings) for b in holding}
        wrong = MISFILED.get((source, section))
        misfiled = all(b.headings and b.headings[-1].startswith(wrong or "\0") for b in holding)
        if wrong is not None and misfiled:
            report.warn(qid, f"the parser files the evidence under {paths}, not {section!r}")
        else:
            report.error(qid, f"the evidence is under {paths}, not {section!r}")
    if DOCUMENT_LANGUAGE.get(source) != q["language"] and "cross-language" not in q["tags"]:
        report.error(qid, "asked in another language than its source: tag cross-language")
    if DOCUMENT_LANGUAGE.get(source) == q["language"] and "cross-language" in q["tags"]:
        report.error(qid, "tagged cross-language, but asked in its source's language")


def check_unanswerable(
    q: dict[str, Any], docs: dict[tuple[str, str], list[Block]], report: Report
) -> None:
    qid = q["id"]
    if q["expected"] or q["source"] is not None or q["section"] is not None or "evidence" in q:
        report.error(qid, "unanswerable with expected facts, a source, a section or evidence")
    if "unanswerable" not in q["tags"]:
        report.error(qid, "not tagged unanswerable")
    near, text = q.get("distractor_source"), q.get("distractor")
    if near is None or text is None:
        report.error(qid, "no distractor_source and distractor: which passage does it sit by?")
        return
    blocks = docs.get((q["tenant"], near))
    if blocks is None:
        report.error(qid, f"distractor_source {near!r} is no document of {q['tenant']}")
    elif not find(blocks, text):
        report.error(qid, f"distractor not verbatim in {near}'s extracted text: {text!r}")
    crossed = DOCUMENT_LANGUAGE.get(near) != q["language"]
    if crossed != ("cross-language" in q["tags"]):
        report.error(qid, "cross-language tag disagrees with the distractor's language")


def check_other(
    q: dict[str, Any], docs: dict[tuple[str, str], list[Block]], report: Report
) -> None:
    qid = q["id"]
    if kind(q) == "leak":
        if q["tenant"] != "acme" or "leak" not in q["tags"] or q["expected"]:
            report.error(qid, "a leak probe is asked by acme, tagged leak, with no expected facts")
        acme = normalise(" ".join(b.text for (t, _), bs in docs.items() if t == "acme" for b in bs))
        for term in q["leak_terms"]:
            if normalise(term) in acme:
                report.error(qid, f"leak term {term!r} occurs in an acme document")
            if normalise(term) in normalise(q["question"]):
                report.error(qid, f"leak term {term!r} is in the question itself")
    if kind(q) == "task":
        if "task" not in q["tags"] or q["source"] is not None or q["section"] is not None:
            report.error(qid, "a task is tagged task, with no source and no section")
        if "evidence" in q or "cross-language" in q["tags"]:
            report.error(qid, "a task has no evidence and is not cross-language")
    elif "task" in q["tags"]:
        report.error(qid, "tagged task, but answerable is not null")
    if kind(q) != "unanswerable" and ("distractor" in q or "unanswerable" in q["tags"]):
        report.error(qid, "a distractor or the unanswerable tag on a question that is not one")
    if kind(q) != "leak" and ("leak_terms" in q or "leak" in q["tags"]):
        report.error(qid, "leak terms or the leak tag on a question that is no leak probe")


def check_conversations(questions: list[dict[str, Any]], report: Report) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for q in questions:
        qid = q.get("id", "?")
        if qid in seen:
            report.error(qid, "duplicate id")
        parent_id = q.get("follow_up_of")
        if parent_id is not None:
            parent = seen.get(parent_id)
            if parent is None:
                report.error(qid, f"its parent {parent_id!r} does not come before it")
            elif parent.get("follow_up_of"):
                report.error(qid, f"its parent {parent_id!r} is itself a follow-up")
            elif parent["tenant"] != q["tenant"] or parent.get("split") != q.get("split"):
                report.error(qid, "a follow-up has its parent's tenant and split")
            if "follow-up" not in q.get("tags", []):
                report.error(qid, "a follow-up is tagged follow-up")
        elif "follow-up" in q.get("tags", []):
            report.error(qid, "tagged follow-up, without follow_up_of")
        seen[qid] = q


def strata(q: dict[str, Any]) -> list[str]:
    """The groups the split is balanced over."""
    keys = [f"tenant {q['tenant']}", f"kind {kind(q)}", f"language {q['language']}"]
    keys += [f"{kind(q)} {q['language']}"]
    if q.get("follow_up_of"):
        keys.append(f"follow-up {kind(q)}")
    if "cross-language" in q["tags"]:
        keys.append(f"cross-language {kind(q)}")
    document = q.get("source") or q.get("distractor_source")
    if document:
        keys.append(f"document {document}")
    keys += [f"shape {tag}" for tag in q["tags"] if tag in SHAPE_TAGS]
    return keys


def assign_splits(questions: list[dict[str, Any]]) -> int:
    """Give every conversation without a split a half, so that every stratum splits evenly.

    A conversation (a first question and its follow-ups) is one unit and goes to one half; a new
    follow-up of a fresh conversation joins the fresh split, and nothing else ever goes there.
    Units are taken in the order of a hash of their first question's id and dealt out in turn;
    then single moves and pairwise swaps are made while they lower the sum, over all strata, of
    the difference between the halves. The result depends on the data alone. Questions that
    have a split keep it: the held-out half stays fixed as questions are added."""
    children: dict[str, list[dict[str, Any]]] = {}
    for q in questions:
        if q.get("follow_up_of"):
            children.setdefault(q["follow_up_of"], []).append(q)
    # difference[key] = tune - held_out
    difference = Counter[str]()
    units: list[tuple[list[dict[str, Any]], Counter[str]]] = []
    for q in questions:
        if q.get("follow_up_of"):
            continue
        unit = [q, *children.get(q["id"], [])]
        keys = Counter(key for x in unit for key in strata(x))
        given = {x["split"] for x in unit if "split" in x}
        if given:
            # A new follow-up joins its conversation's split (two splits: validation says so).
            split = min(given)
            for x in unit:
                x.setdefault("split", split)
            if split in HALVES:  # the fresh split is no half: it weighs on neither side
                fixed = 1 if split == "tune" else -1
                difference.update({k: fixed * n for k, n in keys.items()})
        else:
            units.append((unit, keys))

    def order(u: tuple[list[dict[str, Any]], Counter[str]]) -> tuple[str, ...]:
        first, rest = u[0][0], u[0][1:]
        document = first.get("source") or first.get("distractor_source") or ""
        follow_ups = ",".join(sorted(kind(x) for x in rest))
        digest = hashlib.sha256(first["id"].encode()).hexdigest()
        return (follow_ups, kind(first), first["language"], document, digest)

    # Dealt out in turn in this order, each kind of conversation starts even; the search
    # below then evens out the strata that cut across.
    units.sort(key=order)
    sign = [1 if i % 2 == 0 else -1 for i in range(len(units))]
    for (_, keys), s in zip(units, sign, strict=True):
        difference.update({k: s * n for k, n in keys.items()})

    def gain(change: Counter[str]) -> int:
        """How much `change` (added to the differences) lowers the sum of their sizes."""
        return sum(abs(difference[k]) - abs(difference[k] + n) for k, n in change.items())

    improved = True
    while improved:
        improved = False
        for i, (_, keys) in enumerate(units):
            move = Counter({k: -2 * sign[i] * n for k, n in keys.items()})
            if gain(move) > 0:
                difference.update(move)
                sign[i] = -sign[i]
                improved = True
        for i, (_, keys_i) in enumerate(units):
            for j in range(i + 1, len(units)):
                if sign[i] == sign[j]:
                    continue
                swap = Counter({k: -2 * sign[i] * n for k, n in keys_i.items()})
                swap.update({k: -2 * sign[j] * n for k, n in units[j][1].items()})
                if gain(swap) > 0:
                    difference.update(swap)
                    sign[i], sign[j] = sign[j], sign[i]
                    improved = True
    for (unit, _), s in zip(units, sign, strict=True):
        for x in unit:
            x["split"] = "tune" if s > 0 else "held_out"
    return sum(len(unit) for unit, _ in units)


def balance(questions: list[dict[str, Any]], report: Report) -> list[str]:
    counts = {split: Counter[str]() for split in SPLITS}
    for q in questions:
        if q.get("split") in SPLITS:
            counts[q["split"]].update(strata(q))
    keys = sorted(set().union(*counts.values()))
    lines = ["| stratum | tune | held_out | fresh |", "|---|---|---|---|"]
    for key in keys:
        tune, held = counts["tune"][key], counts["held_out"][key]
        lines.append(f"| {key} | {tune} | {held} | {counts[FRESH][key]} |")
        # A stratum splits as evenly as whole conversations allow: within 2, or 15%.
        if abs(tune - held) > max(2, 0.15 * (tune + held)):
            report.error(key, f"the halves are unbalanced: {tune} tune, {held} held_out")
    return lines


def validate(questions: list[dict[str, Any]]) -> tuple[Report, list[str]]:
    report = Report([], [])
    docs = documents()
    for q in questions:
        check_fields(q, report)
    check_conversations(questions, report)
    if report.errors:
        return report, []
    for q in questions:
        if kind(q) == "answerable":
            check_answerable(q, docs, report)
        elif kind(q) == "unanswerable":
            check_unanswerable(q, docs, report)
        check_other(q, docs, report)
    return report, balance(questions, report)


def summary(questions: list[dict[str, Any]]) -> list[str]:
    rows = Counter[tuple[str, str, str]]()
    for q in questions:
        rows[q["tenant"], kind(q), q["language"]] += 1
        for tag in ("follow-up", "cross-language"):
            if tag in q["tags"]:
                rows[q["tenant"], f"{kind(q)}, {tag}", q["language"]] += 1
    lines = []
    for tenant, category in sorted({(t, c) for t, c, _ in rows}):
        en, zh = rows[tenant, category, "en"], rows[tenant, category, "zh"]
        lines.append(f"{tenant:7} {category:32} en {en:3}  zh {zh:3}  total {en + zh:3}")
    for split in SPLITS:
        part = [q for q in questions if q.get("split") == split]
        kinds = Counter(kind(q) for q in part)
        follow_ups = sum(bool(q.get("follow_up_of")) for q in part)
        detail = ", ".join(
            f"{kinds[k]} {k}" for k in ("answerable", "unanswerable", "task", "leak")
        )
        lines.append(f"split {split:9} {len(part):3}: {detail}; {follow_ups} follow-ups")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--assign-splits", action="store_true", help="split the new questions")
    parser.add_argument("--path", type=Path, default=QUESTIONS)
    args = parser.parse_args(argv)
    questions = load(args.path)
    if args.assign_splits:
        assigned = assign_splits(questions)
        lines = [json.dumps(q, ensure_ascii=False) for q in questions]
        args.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{assigned} question(s) given a split")
    report, table = validate(questions)
    print(f"{len(questions)} questions")
    print("\n".join(summary(questions)))
    print("\n".join(table))
    for line in report.warnings:
        print(f"warning: {line}")
    for line in report.errors:
        print(f"error: {line}", file=sys.stderr)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
