"""Citations found from what a reply says (knowledge.citations): no database, no model."""

from __future__ import annotations

from knowledge.citations import (
    NOT_FOUND_NOTE,
    NOT_FOUND_NOTE_ZH,
    citation_suffix,
    supporting,
    unsupported,
)

PASSAGES = {
    1: "Hotels: EUR 210 a night in Class A cities such as London, EUR 155 in Class B cities.",
    2: "The VPN gateway is vpn.nwrobotics.example; connect with FortiClient 7.2 or later.",
    3: "Trains: second class; first class only for journeys of more than four hours.",
    4: "上海员工每个工作日的餐补为 35 元，随工资发放。",
}


def test_a_figure_the_reply_adds_cites_the_passage_holding_it():
    question = "What is the hotel cap per night in London?"
    assert supporting("It is EUR 210 a night.", question, PASSAGES) == [1]
    assert citation_suffix("It is EUR 210 a night.", question, PASSAGES) == " [1]"


def test_an_identifier_is_a_figure_too():
    reply = "Connect to vpn.nwrobotics.example."
    assert supporting(reply, "Which VPN host do I use?", PASSAGES) == [2]


def test_words_alone_need_two_and_the_questions_own_words_do_not_count():
    question = "Which class for long train journeys?"
    assert supporting("First class, for journeys of more than four hours.", question, PASSAGES) == [
        3
    ]
    # Repeating the question adds nothing: nothing to cite.
    assert supporting("Long train journeys.", question, PASSAGES) == []
    assert citation_suffix("I do not know.", question, PASSAGES) == ""


def test_a_reply_resting_on_two_passages_cites_both_in_order():
    reply = "Book hotels up to EUR 210 and use FortiClient 7.2 for the VPN."
    assert supporting(reply, "Travel and remote access rules?", PASSAGES) == [1, 2]
    assert citation_suffix(reply, "Travel and remote access rules?", PASSAGES) == " [1][2]"


def test_a_second_passage_needs_a_figure_or_three_words_of_its_own():
    # "FortiClient" and "VPN" are two words of passage 2: not enough beside passage 1's figure.
    reply = "Book hotels up to EUR 210 and use FortiClient for the VPN."
    assert supporting(reply, "Travel and remote access rules?", PASSAGES) == [1]


def test_a_chinese_reply_is_matched_by_its_words():
    reply = "每个工作日的餐补是 35 元。"
    assert citation_suffix(reply, "上海员工的餐补是多少？", PASSAGES) == " [4]"


def test_a_reply_that_cites_a_given_passage_itself_is_left_as_it_is():
    assert citation_suffix("EUR 210 [1].", "Hotel cap?", PASSAGES) == ""
    # A number that names no passage given is not a citation: the reply is cited.
    assert citation_suffix("EUR 210 [9].", "Hotel cap?", PASSAGES) == " [1]"


def test_a_reply_stating_what_no_passage_holds_gets_the_not_found_note():
    # An invented figure: no passage holds 6am or 22:00.
    reply = "The Berlin gym is open from 6am to 22:00."
    assert unsupported(reply, "Is there a gym in the Berlin office?", PASSAGES)
    assert citation_suffix(reply, "Is there a gym in the Berlin office?", PASSAGES) == (
        NOT_FOUND_NOTE
    )
    # An invented name: two words of its own.
    assert citation_suffix("The CEO is Jonathan Weber.", "Who is the CEO?", PASSAGES) == (
        NOT_FOUND_NOTE
    )
    # A Chinese reply gets the note in Chinese.
    reply = "上海办公室的健身房早上七点开门。"
    assert citation_suffix(reply, "上海办公室有健身房吗？", PASSAGES) == NOT_FOUND_NOTE_ZH


def test_a_reply_that_states_nothing_to_check_gets_no_note():
    question = "Is there a gym in the Berlin office?"
    # One word of its own is not a statement; words about the passages are not either.
    assert citation_suffix("I do not know.", question, PASSAGES) == ""
    assert citation_suffix("The passages do not mention this.", question, PASSAGES) == ""
    assert citation_suffix("I cannot say.", question, PASSAGES) == ""
    # A reply the passages support is cited, never noted.
    assert citation_suffix("EUR 155 in Class B cities.", "Hotel cap in Lyon?", PASSAGES) == " [1]"
