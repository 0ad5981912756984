"""The capacity bench's workload (bench/corpus.py, bench/capacity.py): what it promises the
operator reading its table, checked without a server."""

from __future__ import annotations

import argparse

from bench.capacity import Answer, Arrival, ChatDraw, replayable, schedule
from bench.capacity_results import summarize
from bench.corpus import Question, QuestionDraw, build


def test_the_corpus_is_company_sized_bilingual_and_the_same_every_run() -> None:
    corpus = build()
    assert len(corpus.docs) >= 300
    assert len(corpus.topics) >= 3000
    assert {d.lang for d in corpus.docs} == {"en", "zh"}
    again = build()
    assert [d.markdown() for d in again.docs[:20]] == [d.markdown() for d in corpus.docs[:20]]
    # Every section states facts with questions, each naming what a right answer contains.
    assert all(t.facts and all(f.questions and f.answer for f in t.facts) for t in corpus.topics)


def test_the_hottest_tenth_of_topics_gets_half_of_the_questions() -> None:
    draw = QuestionDraw(build())
    assert abs(draw.hot_share() - 0.5) < 0.01
    hot = set(draw.ranked[: len(draw.ranked) // 10])
    asked = [draw.first() for _ in range(2000)]
    share = sum(q.topic in hot for q in asked) / len(asked)
    assert 0.44 < share < 0.56
    assert len({q.text for q in asked}) == len(asked)  # no text asked twice


def test_arrivals_are_poisson_at_one_question_per_three_minutes_a_third_follow_ups() -> None:
    draw = QuestionDraw(build(), seed=1)
    arrivals = schedule(60, 3600.0, 0.0, draw, seed=7)
    # 60 employees, one question per 180 s each: 20 a minute, 1,200 an hour.
    assert 1100 < len(arrivals) < 1300
    follow_ups = len(arrivals) - len({a.conversation for a in arrivals})
    assert 0.29 < follow_ups / len(arrivals) < 0.37
    assert len({a.question.text for a in arrivals}) == len(arrivals)
    # A follow-up stays in its asker's conversation and asks about the same document.
    corpus = draw.corpus
    first_of: dict[int, Arrival] = {}
    for a in arrivals:
        if a.conversation in first_of:
            before = first_of[a.conversation]
            assert before.employee == a.employee
            assert corpus.topics[before.question.topic].doc == corpus.topics[a.question.topic].doc
        else:
            first_of[a.conversation] = a


def test_the_chat_mix_never_repeats_a_question() -> None:
    draw = ChatDraw(3)
    arrivals = schedule(40, 1800.0, 0.0, draw, seed=3)
    assert len({a.question.text for a in arrivals}) == len(arrivals)


def test_goodput_counts_only_measured_questions_within_both_limits() -> None:
    args = argparse.Namespace(slo_ttft=3.0, slo_speed=5.0)

    def answer(
        measured: bool, ttft: float, tokens: int, duration: float, status: int = 200
    ) -> Answer:
        a = Answer(Arrival(0.0, 0, 0, Question(-1, "q", "240", "en"), measured))
        a.ttft, a.tokens, a.duration, a.status, a.text = ttft, tokens, duration, status, "GBP 240"
        a.prompt_tokens = 10
        return a

    answers = [
        answer(True, 1.0, 41, 5.0),  # 10 tokens/s: within
        answer(True, 4.0, 41, 8.0),  # first word too late
        answer(True, 1.0, 41, 21.0),  # 2 tokens/s: too slow
        answer(True, 0.5, 0, 0.5, status=503),  # refused
        answer(False, 9.0, 41, 20.0),  # warm-up: not counted
    ]
    level = summarize("qassist", "knowledge", 10, 60.0, answers, args)
    assert (level.offered, level.answered, level.refused) == (4, 3, 1)
    assert level.goodput == 0.25
    assert not level.served
    assert level.right == 3


def test_llama_server_replays_every_question_qassist_s_model_read_even_unfinished_ones() -> None:
    def answer(status: int, prompt_tokens: int, error: str = "") -> Answer:
        a = Answer(Arrival(0.0, 0, 0, Question(-1, "q", "", "en"), True))
        a.status, a.prompt_tokens, a.error = status, prompt_tokens, error
        return a

    read = answer(200, 420)
    cached_reply = answer(200, 0)  # answered without the model: it has no prompt to replay
    unfinished = answer(200, 0, "not answered before the run ended")
    refused = answer(503, 0)
    answers = [read, cached_reply, unfinished, refused]
    chosen = replayable([a.arrival for a in answers], {id(a.arrival): a for a in answers})
    assert chosen == [read.arrival, unfinished.arrival, refused.arrival]
