"""bench/rag_eval's splits (bench/rag_eval/data/check.py): the two halves are dealt out evenly,
and the fresh split, written after the held-out half had been read, is never moved, never dealt
into and never weighs on the halves' balance."""

from __future__ import annotations

from typing import Any

from bench.rag_eval.data.check import (
    QUESTIONS,
    Report,
    assign_splits,
    balance,
    check_conversations,
    load,
)


def question(
    qid: str, *, language: str = "en", split: str | None = None, **extra: Any
) -> dict[str, Any]:
    q: dict[str, Any] = {
        "id": qid,
        "tenant": "acme",
        "question": f"{qid}?",
        "language": language,
        "expected": ["x"],
        "source": "travel-policy.md",
        "section": "5. Hotels",
        "answerable": True,
        "tags": ["follow-up"] if "follow_up_of" in extra else [],
        **extra,
    }
    if split is not None:
        q["split"] = split
    return q


def test_assigning_splits_never_moves_a_fresh_question_nor_deals_a_new_one_into_it() -> None:
    questions = [
        question("travel-a", split="tune"),
        question("travel-b", split="held_out"),
        question("travel-fresh", split="fresh"),
        question("travel-fresh-more", follow_up_of="travel-fresh"),  # new, in a fresh conversation
        *(question(f"travel-new-{i}") for i in range(6)),
    ]
    assert assign_splits(questions) == 6
    splits = {q["id"]: q["split"] for q in questions}
    assert splits["travel-fresh"] == splits["travel-fresh-more"] == "fresh"
    assert (splits["travel-a"], splits["travel-b"]) == ("tune", "held_out")
    new = [splits[f"travel-new-{i}"] for i in range(6)]
    assert sorted(new) == ["held_out"] * 3 + ["tune"] * 3


def test_fresh_questions_weigh_on_neither_half_when_new_ones_are_dealt() -> None:
    # Four fresh Chinese questions: counted as held-out, they would push both new ones to tune.
    questions = [question(f"travel-fresh-{i}", language="zh", split="fresh") for i in range(4)]
    questions += [question("travel-new-1", language="zh"), question("travel-new-2", language="zh")]
    assign_splits(questions)
    assert sorted(q["split"] for q in questions[-2:]) == ["held_out", "tune"]


def test_a_follow_up_outside_its_parents_split_is_an_error() -> None:
    report = Report([], [])
    parent = question("travel-fresh", split="fresh")
    check_conversations(
        [parent, question("travel-more", split="tune", follow_up_of=parent["id"])], report
    )
    assert report.errors == ["travel-more: a follow-up has its parent's tenant and split"]


def test_the_halves_are_balanced_without_the_fresh_split() -> None:
    report = Report([], [])
    questions = [question("travel-a", split="tune"), question("travel-b", split="held_out")]
    questions += [question(f"travel-fresh-{i}", language="zh", split="fresh") for i in range(5)]
    table = balance(questions, report)
    assert report.errors == []
    assert "| language zh | 0 | 0 | 5 |" in table


def test_the_files_splits_are_settled_and_the_fresh_split_is_whole() -> None:
    questions = load(QUESTIONS)
    before = [q["split"] for q in questions]
    assert assign_splits(questions) == 0
    assert [q["split"] for q in questions] == before
    fresh = {q["id"] for q in questions if q["split"] == "fresh"}
    assert len(fresh) >= 70
    parents = {q["follow_up_of"] for q in questions if q["id"] in fresh and "follow_up_of" in q}
    assert parents <= fresh
