"""A follow-up made standalone from the conversation (knowledge.followups), and the
answerability signals and decision (knowledge.answerability): pure functions."""

from __future__ import annotations

import pytest

from knowledge import answerability, followups, subjects
from knowledge.answerability import Signals
from knowledge.asked import MONEY, TIME
from knowledge.sentences import split_passage


def test_a_pronoun_follow_up_takes_the_subject_of_the_question_before_it():
    asked = followups.standalone(
        "And how often do I have to change it?", ["How long must my password be?"]
    )
    assert asked.startswith("And how often do I have to change it? (")
    assert "password" in asked


def test_a_question_that_stands_on_its_own_is_left_as_it_is():
    question = "What is the hostname of the company VPN server?"
    assert followups.standalone(question, ["How long must my password be?"]) == question
    assert followups.standalone("And for Amsterdam?", []) == "And for Amsterdam?"


def test_a_chain_of_follow_ups_carries_the_first_subject_along():
    asked = followups.standalone(
        "And for Amsterdam?",
        ["What is the hotel cap per night in London?", "And in Paris?"],
    )
    assert "hotel" in asked
    assert "Amsterdam" in asked


def test_a_chinese_follow_up_is_recognised():
    assert followups.is_follow_up("那上海呢？")
    asked = followups.standalone("那上海呢？", ["北京办公室的停车费是多少？"])
    assert "停车费" in asked


def test_signals_see_whether_the_questions_rarest_term_is_in_the_passages():
    weights = {"gym": 3.0, "subsidy": 1.0}
    subject = subjects.subject("Is there a gym subsidy?", lambda t: weights.get(t, 0.5))
    meals = split_passage(1, "The meal subsidy is 35 yuan a day.", "Benefits / Meals")
    found = answerability.signals(subject, meals, [0.3], 0.4)
    assert found.rarest_present == 0.0
    assert 0.0 < found.coverage < 0.5
    gym = split_passage(1, "The gym subsidy is 30 EUR a month.", "Benefits / Sport")
    assert answerability.signals(subject, gym, [0.7], 0.5).rarest_present == 1.0


def test_the_fused_probability_grows_with_every_signal():
    low = Signals(coverage=0.1, rarest_present=0.0, similarity=0.2, retrieval=0.3)
    high = Signals(coverage=0.9, rarest_present=1.0, similarity=0.6, retrieval=0.5)
    assert answerability.probability(low) < answerability.probability(high)
    assert not answerability.answers(low, threshold=0.75)
    assert answerability.answers(high, threshold=0.75)
    assert answerability.answers(low)  # the default declines nothing beforehand
    weights = {"bias": 0.0, "model_yes": 4.0}
    sure = Signals(model_yes=0.9)
    assert answerability.probability(sure, weights) > answerability.probability(
        Signals(model_yes=0.1), weights
    )


def test_writing_and_general_tasks_do_not_ask_the_documents():
    from knowledge.requests import is_task

    for task in (
        "Draft an email to my team announcing Friday's offsite",
        'Can you translate "good morning" into Chinese?',
        "Please summarise the benefits of unit tests in three bullet points",
        "Write a polite reminder to submit expense reports",
        "帮我写一封邮件，通知大家周五团建",
        "把这句话翻译成英文：“请在周五之前提交报销单。”",  # the object before the verb
        "帮我给新同事写一段简短的欢迎词。",
    ):
        assert is_task(task), task
    for question in (
        "What is the hotel cap per night in Paris?",
        "How do I write an expense report?",
        "Summarise the leave policy",  # names the documents' rules
        "Write a reminder based on the travel policy",
        "总结一下年假规定",
        "把报销单交给谁？",
        "给多少交通补贴？",
    ):
        assert not is_task(question), question


def test_one_as_a_numeral_does_not_lean_back_but_one_standing_for_something_does() -> None:
    assert not followups.is_marked("Name one colour.")
    assert followups.is_marked("Is there one for interns?")
    assert followups.is_marked("Which one is cheaper?")
    assert followups.is_marked("And for Amsterdam?")
    assert followups.is_marked("那上海呢？")
    # Short, so still a follow-up candidate whose standalone form is searched too; only a
    # marked one is judged on that form (knowledge.turns).
    assert followups.is_follow_up("Name one colour.")


def test_a_models_own_marker_after_an_unsupported_claim_is_no_citation() -> None:
    from knowledge.turns import mark_cited

    sources = [{"number": 1, "title": "Travel"}, {"number": 2, "title": "Meals"}]
    reply = "It is EUR 210 [1]. Meals are EUR 48 [2]."
    quotes = {"2": [{"text": "The meal allowance abroad is EUR 48 a day."}]}
    warned = mark_cited(sources, reply, {"verdict": "unsupported", "quotes": quotes})
    assert [s["cited"] for s in warned] == [False, True]
    supported = mark_cited(sources, reply, {"verdict": "supported", "quotes": quotes})
    assert [s["cited"] for s in supported] == [True, True]


def test_a_follow_up_points_back_by_a_pronoun_not_by_a_new_case() -> None:
    assert followups.points_back("How far in advance do I have to request that?")
    assert followups.points_back("And how often do I have to change it?")
    assert followups.points_back("它的有效期是多久？")
    assert not followups.points_back("And if the trip is to Amsterdam instead?")
    assert not followups.points_back("那 L2 内部级的呢？")


@pytest.mark.parametrize(
    ("question", "earlier", "kind"),
    [
        # The same question again for another case: its kind.
        ("那如果是在埃因霍温入职呢？", ["在慕尼黑入职第一天几点到？"], TIME),
        ("And if the trip is to Amsterdam instead?", ["How much can I spend on a hotel?"], MONEY),
        # Two steps back, through a follow-up that asked again too.
        ("And in Paris?", ["How much may a hotel in Munich cost?", "And in Hamburg?"], MONEY),
        # A question word of its own: it asks something new.
        ("And how often do I have to change it?", ["How long must my password be?"], None),
        # Its own kind first.
        ("And how much does it cost?", ["When does the gym open?"], MONEY),
        # Not a follow-up: nothing carried over.
        ("Is the canteen open on Saturdays?", ["How much is the hotel cap?"], None),
    ],
)
def test_a_follow_up_that_asks_again_for_another_case_asks_for_the_same_kind(
    question: str, earlier: list[str], kind: str | None
) -> None:
    assert followups.kind_asked(question, earlier) == kind
