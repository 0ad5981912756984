"""What kind of figure a question asks for, and what kind a reply's figure is (knowledge.asked):
pure functions, English and Chinese."""

from __future__ import annotations

import pytest

from knowledge import asked
from knowledge.asked import MONEY, PERCENT, TIME


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How soon do I have to report a lost phone?", TIME),
        ("By when must my report be approved?", TIME),
        ("I've worked here four years. How much holiday do I get?", TIME),
        ("How much paid time off do I get when my grandmother dies?", TIME),
        ("On which weekday are expense reports paid out?", TIME),
        ("How much overtime can I work before I get paid extra?", TIME),
        ("那门禁卡丢了要多久之内报告？", TIME),
        ("夏季高温补贴是哪几个月发？", TIME),
        ("门禁卡丢了，补一张要交多少钱？", MONEY),
        ("How much does the company pay towards a gym membership?", MONEY),
        ("What percentage of my salary goes into the pension?", PERCENT),
        ("牙科报销比例是多少？", PERCENT),
        ("How much holiday pay do I get?", MONEY),
        (
            "Above what registration fee does a conference need my department head's approval?",
            MONEY,
        ),
        ("Over which amount do I need a second signature?", MONEY),
        ("Above what level is a document confidential?", None),
        ("What is the hostname of the company VPN?", None),
        # "when" often asks for a condition; 几号 for a building, a line, an extension.
        ("When do I need approval for travel?", None),
        ("几号线地铁到公司？", None),
        ("一年能报销多少次体检费？", None),
        ("Which client software do I need?", None),
        ("Write a note to my team about when the office closes.", None),
    ],
)
def test_a_question_asks_for_a_kind_only_where_its_wording_says_so(question, kind):
    assert asked.asked_kind(question) == kind


def test_a_figure_takes_its_kind_from_the_words_around_it():
    kinds = asked.figure_kinds(
        "EUR 48 a day, 50 元, 70%, within 24 hours, 3 天, by the 7th working day, week 6, "
        "at 09:00, 31 March, extension 4444"
    )
    assert kinds == {
        "48": {MONEY},
        "50": {MONEY},
        "70": {PERCENT},
        "24": {TIME},
        "3": {TIME},
        "7": {TIME},
        "6": {TIME},
        "09:00": {TIME},
        "31": {TIME},
        "4444": set(),
    }
    kinds = asked.figure_kinds("09:00-18:00, 31.03.2025, 48h内, £50, 1.5k EUR, 第3条, 9-17")
    assert kinds == {
        "09:00-18:00": {TIME},
        "31.03.2025": {TIME},
        "48": {TIME},
        "50": {MONEY},
        "1.5": {MONEY},
        "3": set(),
        "9-17": set(),
    }


def test_a_time_can_be_given_by_a_weekday_a_month_or_at_once_and_an_amount_by_a_share():
    assert asked.gives(TIME, "They are paid out on Thursday.")
    assert asked.gives(TIME, "每周二中午前审批。")
    assert asked.gives(TIME, "Report it at once.")
    assert asked.gives(TIME, "Probation lasts six months.")
    assert asked.gives(TIME, "You get one working day off.")
    assert asked.gives(TIME, "By the end of the month.")
    assert asked.gives(TIME, "Until Christmas Eve.")
    times = ["Salaries are paid monthly.", "工资按月发放。", "On Tuesdays.", "Mon-Fri.", "下午五点"]
    for reply in times:
        assert asked.gives(TIME, reply), reply
    for reply in ["Parking is free for employees.", "全额报销。", "The company covers half."]:
        assert asked.gives(MONEY, reply), reply
    assert asked.gives(TIME, "春节前两周发放。")
    assert asked.gives(TIME, "试用期为三个月，可请半天假。")
    assert not asked.gives(TIME, "Report it to reception.")
    assert not asked.gives(TIME, "VPN 连上以后多久会自动断开？")
    # A negation or a condition answers without a figure: never said to give none.
    assert asked.answers_otherwise("Change it only when you suspect it was exposed.")
    assert asked.answers_otherwise("无需报告。")
    assert asked.answers_otherwise("L2 内部级文件的保存期限是按业务需要。")  # a condition
    assert asked.answers_otherwise("Keep them as long as needed, depending on the project.")
    assert not asked.answers_otherwise("VPN 连上以后多久会自动断开？")
    assert asked.asked_kind("And how often do I have to change it?") is None
    assert asked.gives(MONEY, "补卡收取五十元。")
    # What the reply repeats from the question gives nothing.
    question = "I've been here four full years and 2 months. How much holiday do I get?"
    assert not asked.gives(TIME, "After four full years and 2 months you get more.", question)
    assert asked.gives(TIME, "After four full years you get 28 days.", question)
    assert asked.gives(MONEY, "The company pays 70% of it.")
    assert not asked.gives(PERCENT, "It costs EUR 40.")


def test_a_figure_of_another_kind_is_a_mismatch_only_when_nothing_answers_the_kind_asked():
    question = "那门禁卡丢了要多久之内报告？"
    assert asked.mismatched(question, "补一张要交的工本费 50 元。", ["50"]) == {"50": MONEY}
    # A reply that gives the time may say more: the fee is not a mismatch then.
    assert asked.mismatched(question, "24 小时内报告；补卡 50 元。", ["24", "50"]) == {}
    # A figure of no known kind is never one; nor is anything when the kind asked is unknown.
    assert asked.mismatched(question, "拨分机 8000。", ["8000"]) == {}
    # Nor when another figure has no kind: it may be the answer ("9-17").
    office = "What time does the office open?"
    assert asked.mismatched(office, "Office hours are 9-17; parking is EUR 5.", ["9-17", "5"]) == {}
    assert asked.mismatched("Who approves it?", "EUR 50.", ["50"]) == {}


def test_a_count_asked_in_a_measure_word_is_mismatched_only_by_figures_in_other_ones():
    assert asked.asked_measure("PIN 码要设几位？") == "位"
    assert asked.asked_measure("审批需要几个人签字？") == "人"
    assert asked.asked_measure("一年有多少个工作日？") is None  # 个 says nothing; a time is a kind
    assert asked.mismatched_measure("要设 18 层。", ["18"], "位") == {"18": "层"}
    # A figure in the measure asked for (or a like one: 人 for 位) answers it; one with no
    # measure word after it may be the answer.
    assert asked.mismatched_measure("6 位数字，18 层发放。", ["6", "18"], "位") == {}
    assert asked.mismatched_measure("需要 3 个人。", ["3"], "位") == {}
    assert asked.mismatched_measure("至少 8 个字符。", ["8"], "位") == {}


@pytest.mark.parametrize(
    ("question", "counted"),
    [
        ("How many free counselling sessions do I get per year?", "sessions"),
        ("how many digits must a PIN have", "digits"),
        ("How many laptops?", "laptops"),
        ("What is the hotel cap in London?", None),
    ],
)
def test_what_a_how_many_question_counts_is_its_last_word_before_the_verb(question, counted):
    assert asked.counted_noun(question) == counted
