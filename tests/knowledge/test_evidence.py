"""The support check, without a database or a model: sentences, claims, what was asked, and
whether a claim rests on a sentence about it (knowledge.evidence)."""

from __future__ import annotations

import pytest

from knowledge import evidence, subjects
from knowledge.evidence import FIGURE, NAME
from knowledge.sentences import Sentence, split_passage
from knowledge.subjects import Subject

HOTELS = (
    "The nightly cap is EUR 160 in most cities and EUR 220 in Paris, London and Zurich.\n"
    "City class: A; Cities: Paris, London; Hotel cap: EUR 220\n"
    "City class: B; Cities: Amsterdam, Milan; Hotel cap: EUR 155"
)
MEALS = "The meal per diem is EUR 48 per day abroad. Receipts are not needed for it."
CARS = "Private cars are paid EUR 0.32 per kilometre (mileage), up to 500 km a trip."


def subject_of(question: str, rare: dict[str, int] | None = None) -> Subject:
    # Every term weighs 1 unless said otherwise (the product weighs by rarity: support.py).
    weights = rare or {}
    return subjects.subject(question, lambda term: float(weights.get(term, 1)))


def test_a_passage_is_cut_into_sentences_lines_and_rows_with_their_offsets():
    text = (
        "Hotels. The cap is EUR 160, e.g. in Lyon.\nCity class: A; Hotel cap: EUR 220\n"
        "机票提前14天预订；商务舱超过9小时。"
    )
    found = split_passage(3, text, "Travel policy / Hotels")
    assert [s.text for s in found] == [
        "Hotels.",
        "The cap is EUR 160, e.g. in Lyon.",
        "City class: A; Hotel cap: EUR 220",
        "机票提前14天预订；",
        "商务舱超过9小时。",
    ]
    assert all(text[s.start : s.end] == s.text for s in found)
    assert {s.number for s in found} == {3}
    assert found[0].context == "Travel policy / Hotels"


def test_a_numbered_list_run_into_one_line_keeps_each_items_number_out_of_its_sentences():
    # A PDF's text gives a numbered list as one line; a passage may end on the next item's
    # number. Neither number is part of a sentence, nor a figure one holds.
    text = (
        "1. Submit the report in Ledgerline. 2. Reports approved by Tuesday 12:00 are paid in "
        "that week's Thursday run. 3. Advances of up to EUR 800 can be requested. 4.\n"
        "10) 共 12 张桌子\nThe cap is approx. 20 EUR. 2024 was a leap year.\n3.3 Lost devices"
    )
    found = split_passage(2, text, "Expenses / Payment")
    assert [s.text for s in found] == [
        "Submit the report in Ledgerline.",
        "Reports approved by Tuesday 12:00 are paid in that week's Thursday run.",
        "Advances of up to EUR 800 can be requested.",
        "共 12 张桌子",
        "The cap is approx. 20 EUR. 2024 was a leap year.",
        "3.3 Lost devices",
    ]
    assert all(text[s.start : s.end] == s.text for s in found)


def test_a_list_items_number_supports_no_figure_of_a_reply():
    # "…following week's run. 3." once held the 3 of "within 3 working days".
    question = "By when must my report be approved to make this week's payment?"
    payment = (
        "2. Reports fully approved by Tuesday 12:00 CET are paid in that week's Thursday run; "
        "later approvals go into the following week's run. 3. Employees of the Shanghai entity "
        "are reimbursed in CNY with the next monthly salary payment."
    )
    checked = evidence.check(
        "Reports must be approved within 3 working days.",
        question,
        {1: (payment, "Expenses / 6. Payment")},
        subject_of(question, {"report": 2, "approved": 2, "payment": 2}),
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.key for c in checked.unsupported] == ["3"]


def test_claims_are_the_figures_identifiers_and_names_the_question_does_not_hold():
    found = evidence.claims(
        "Connect with FortiClient to vpn.nwrobotics.example [2]. Guests use NWR-Guest; the CFO "
        "signs trips over EUR 5,000. 每年最多十四天。",
        "How do I connect to the VPN from Paris?",
    )
    assert [(c.key, c.kind) for c in found] == [
        ("5000", FIGURE),
        ("14", FIGURE),
        ("forticlient", NAME),
        ("vpn.nwrobotics.example", NAME),
        ("nwr-guest", NAME),
        ("cfo", NAME),
    ]


def test_a_name_the_question_gives_in_another_number_is_no_claim():
    # "On a Wednesday" asked, "on Wednesdays" answered: the reply states no weekday of its own.
    found = evidence.claims(
        "On Wednesdays, core hours are from 10:00 to 15:00.", "On a Wednesday, until when?"
    )
    assert [c.key for c in found] == ["10:00", "15:00"]
    assert [c.key for c in evidence.claims("Also on Fridays.", "On a Wednesday?")] == ["fridays"]


def test_the_half_of_the_day_is_no_name_a_reply_states():
    found = evidence.claims("From 10:00 AM to 3 p.m., or 15:00PM; ask your PM", "Until when?")
    assert [c.key for c in found] == ["10:00", "3", "15:00", "pm"]


def test_an_acronym_is_held_as_written_not_as_the_word_it_spells():
    (claim,) = evidence.claims("需要随身带 IT 服务台。", "需要随身带什么证明？")
    assert (claim.key, claim.kind) == ("it", NAME)
    assert not evidence.holds(Sentence(1, 0, 0, "Request it at least 4 weeks in advance."), claim)
    assert evidence.holds(Sentence(1, 0, 0, "报告 IT 服务台，以便远程擦除数据。"), claim)


def test_list_numbering_and_citation_marks_are_not_figures_a_reply_states():
    reply = "食堂开放时间：\n1. 午餐 11:30–13:30 [2]\n2) 晚餐 17:30【1】\n- 3 层\n10. 共 12 张桌子"
    keys = [k for k, _ in evidence.figures(evidence.without_marks(reply))]
    assert keys == ["11:30-13:30", "17:30", "3", "12"]
    assert [c.key for c in evidence.claims(reply, "食堂几点开门？")] == keys


def test_a_passage_cited_in_words_is_no_figure_but_a_section_number_is() -> None:
    # "根据第2段" is the model citing passage 2; "第3.3节" is the document's section: a claim.
    reply = "根据第2段的指示，须在周四 17:00 前提交（见第3.3节）。As passage 1 says, 5 days."
    keys = [c.key for c in evidence.claims(reply, "最晚什么时候提交？")]
    assert keys == ["17:00", "3.3", "5"]


def test_a_figure_is_compared_whatever_its_separators_and_numerals():
    assert evidence.figure_key("1,500") == evidence.figure_key("1.500") == "1500"
    assert evidence.figure_key("0,32") == "0.32"
    assert evidence.figure_key("１２０") == "120"
    assert [k for k, _ in evidence.figures("两小时, 十四天, 一般, 3,808")] == ["3808", "2", "14"]


def test_a_claim_held_by_a_sentence_about_the_question_is_supported_and_quoted():
    checked = evidence.check(
        "You may pay at most EUR 220 a night in Paris.",
        "What is the hotel cap per night in Paris?",
        {1: (HOTELS, "Travel policy / Hotels"), 2: (MEALS, "Travel policy / Meals")},
        subject_of("What is the hotel cap per night in Paris?"),
    )
    assert checked.verdict == evidence.SUPPORTED
    assert [c.key for c in checked.supported] == ["220"]
    assert checked.cited == [1]
    assert [s.text for s in checked.quotes[1]] == [
        "The nightly cap is EUR 160 in most cities and EUR 220 in Paris, London and Zurich."
    ]


def test_a_figure_from_the_next_passage_over_is_not_supported():
    # The meal per diem given as the mileage rate: 48 is in the documents, but in a sentence
    # about meals, not mileage.
    question = "What is the mileage rate for a motorbike?"
    checked = evidence.check(
        "The mileage rate is EUR 48 per day.",
        question,
        {1: (MEALS, "Travel policy / Meals"), 2: (CARS, "Travel policy / Private cars")},
        subject_of(question, {"motorbike": 3}),
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.key for c in checked.unsupported] == ["48"]
    assert checked.quotes == {}


def test_a_figure_nobody_wrote_is_unsupported_and_the_closest_sentence_is_known():
    question = "Does the company pay towards a gym membership?"
    checked = evidence.check(
        "The company pays towards a gym membership of 40 EUR.",
        question,
        {1: (MEALS, "Benefits / Meals")},
        subject_of(question, {"gym": 3, "membership": 2}),
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.text for c in checked.unsupported] == ["40"]
    assert checked.closest is not None
    assert checked.closest.number == 1


def test_across_languages_the_embedder_says_what_a_sentence_is_about():
    question = "巴黎的酒店每晚最多多少钱？"
    passages = {1: (HOTELS, "Travel policy / Hotels")}
    reply = "巴黎每晚最多220欧元。"
    without = evidence.check(reply, question, passages, subject_of(question))
    assert without.verdict == evidence.UNSUPPORTED  # no word in common
    subject = subject_of(question)
    # The product's presence finds 巴黎 in "Paris" and 酒店 in "hotel" by the embedder.
    close = evidence.check(
        reply,
        question,
        passages,
        subject,
        similarity=lambda sentences: [0.6 if "Paris" in s.text else 0.1 for s in sentences],
        presence=lambda sentences: [
            set(subject.terms) if "Paris" in s.text else set() for s in sentences
        ],
    )
    assert close.verdict == evidence.SUPPORTED
    assert close.quotes[1][0].text.startswith("The nightly cap")


def test_a_reply_without_figures_or_names_has_nothing_to_check():
    question = "Can I take the train in first class?"
    checked = evidence.check(
        "Yes, trains over four hours may be booked in first class.",
        question,
        {1: ("Trains over four hours may be booked in first class.", "Travel / Trains")},
        subject_of(question),
    )
    assert checked.verdict == evidence.NOTHING_TO_CHECK


def test_a_sentence_must_speak_of_the_questions_strong_terms():
    # "Hamburg" weighs most: the Munich row holds the range but is not about Hamburg.
    question = "Which address range does the corporate Wi-Fi use at our Hamburg office?"
    rows = "Network: NWR-Corp; Wi-Fi for company laptops; Address range: Munich 10.20.0.0/16"
    checked = evidence.check(
        "The corporate Wi-Fi uses 10.20.0.0/16.",
        question,
        {1: (rows, "IT Security / Networks and Wi-Fi")},
        subject_of(question, {"hamburg": 3}),
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert checked.absent == ["hamburg"]
    subject = subjects.subject(question, lambda t: 3.0 if t == "hamburg" else 1.0)
    assert subject.strong(0.5) == {"hamburg"}
    nouns_only = subjects.Subject(subject.terms, core=frozenset({"address", "range"}))
    assert nouns_only.strong(0.5) == {"address", "range"}


def test_a_name_the_passages_titles_use_is_not_a_claim():
    question = "How many days of unused annual leave can I carry over?"
    checked = evidence.check(
        "Under the Northwind Leave Policy you may carry over 5 days.",
        question,
        {1: ("You may carry over up to 5 days of unused annual leave.", "Northwind / Leave")},
        subject_of(question),
        is_common=lambda word: word in {"policy", "leave"},  # everyday words (wordfreq)
    )
    assert [c.text for c in checked.supported] == ["5"]
    assert checked.verdict == evidence.SUPPORTED


def test_a_missing_secondary_term_no_longer_warns_a_supported_figure() -> None:
    question = "The hotel's own website is cheaper than our booking tool. How much cheaper?"
    sentence = (
        "Bookings made outside TripDesk (for example directly on a hotel's web site) are "
        "reimbursed only if they were at least 10% cheaper than the best TripDesk offer."
    )
    weights = {"hotel's": 2.6, "booking": 1.6, "tool": 1.3, "cheaper": 1.4, "website": 0.9}
    subject = subjects.Subject(
        {t: weights.get(t, 0.2) for t in subjects.subject_terms(question)},
        core=frozenset({"hotel's", "booking", "tool", "website"}),
    )
    checked = evidence.check(
        "It must be at least 10% cheaper.",
        question,
        {1: (sentence, "Travel / 3. Booking")},
        subject,
    )
    assert checked.verdict == evidence.SUPPORTED
    strict = evidence.Thresholds(strong_missing=0.0)
    again = evidence.check(
        "It must be at least 10% cheaper.",
        question,
        {1: (sentence, "Travel / 3. Booking")},
        subject,
        thresholds=strict,
    )
    assert again.verdict == evidence.UNSUPPORTED


@pytest.mark.parametrize(
    ("word", "question", "expected"),
    [
        ("closing", "And when is closing planned?", True),  # a noun (and a verb)
        ("planned", "And when is closing planned?", False),  # only a verb
        ("clicked", "I clicked a link in a phishing email.", False),
        ("phishing", "I clicked a link in a phishing email.", True),  # not in the lexicon
        ("unused", "How many unused holiday days can I carry over?", True),  # an adjective
        ("shanghai", "What does parking cost at the Shanghai office?", True),  # capitalised
        ("shanghai", "what does parking cost at the shanghai office?", False),  # a verb, then
    ],
)
def test_only_words_that_can_name_a_thing_decide_what_a_question_is_about(
    word: str, question: str, expected: bool
) -> None:
    from knowledge.support import names_a_thing

    assert names_a_thing(word, question) is expected


def test_a_code_a_question_names_is_its_subject() -> None:
    # "D 类城市" is a class the handbook does not have: its "D" is the question's subject, and
    # the row of class C, which holds 115, is not about it.
    question = "出差去 D 类城市，酒店每晚的上限是多少？"
    subject = subjects.Subject({"d": 3.0, "酒店": 1.1, "城市": 0.4})
    checked = evidence.check(
        "D 类城市酒店每晚的上限是 EUR 115。",
        question,
        {1: ("City class: Class C; Examples: all other cities; Cap per night: EUR 115", "Hotels")},
        subject,
        presence=lambda sentences: [{"酒店", "城市"} for _ in sentences],
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert subjects.codes_in("Do I need an A1 certificate in the EU?") == {"a1", "eu"}
    assert subjects.codes_in("I clicked a link.") == set()


def test_a_clause_after_a_chinese_semicolon_is_about_what_its_sentence_is_about() -> None:
    # The sentence is cut at "；" (its clauses are quoted apart), but the clause after it goes on
    # with the sentence: PeopleHub is where the long-commute allowance is registered.
    commute = (
        "住址与办公室直线距离超过 30 公里的员工，每月另加 300 元远途通勤补贴；"
        "须在 PeopleHub 中登记住址并每年更新一次。\n"
        "员工可在 PeopleHub 中查看体检报告。"
    )
    question = "我家离公司 40 公里，每月有额外的交通补贴吗？"
    subject_ = subject_of(question, {"公里": 3, "补贴": 2})
    reply = "每月另加 300 元远途通勤补贴，须在 PeopleHub 中登记住址。"
    checked = evidence.check(reply, question, {1: (commute, "员工手册 / 交通补贴")}, subject_)
    assert checked.verdict == evidence.SUPPORTED
    assert [s.text for s in checked.quotes[1]] == [
        "住址与办公室直线距离超过 30 公里的员工，每月另加 300 元远途通勤补贴；",
        "须在 PeopleHub 中登记住址并每年更新一次。",
    ]
    # The same clause on a line of its own is a sentence of its own, about something else.
    apart = commute.replace("；", "。\n")
    checked = evidence.check(reply, question, {1: (apart, "员工手册 / 交通补贴")}, subject_)
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.text for c in checked.unsupported] == ["PeopleHub"]


RETENTION = (
    "要求: 保存期限; L1 公开: 不限; L2 内部: 按业务需要; L3 机密: 合同结束后 5 年; "
    "L4 绝密: 由数据所有者书面确定"
)
PARKING = "Item: parking space; Munich office: EUR 90 a month; Shanghai office: 400 元 a month"
FLIGHTS = (
    "Scheduled flight time (one leg): more than 9 hours; Class: Business class, with approval "
    "of your vice president"
)


DESTRUCTION = (
    "要求: 销毁; L1 公开: 普通回收; L2 内部: 普通回收; L3 机密: 碎纸机（P-4 级及以上）; "
    "L4 绝密: 交信息安全办公室统一销毁并记录"
)


def test_words_of_another_column_of_the_row_are_not_the_answer() -> None:
    # No figure to check: the reply reads out L4's rule, asked about an L3 file.
    question = "L3 机密级的纸质文件要怎么销毁？"
    subject_ = subject_of(question, {"l3": 4, "机密": 3, "销毁": 3})
    passages = {1: (DESTRUCTION, "信息安全守则 / 各级别的处理要求")}
    checked = evidence.check("应该交信息安全办公室统一销毁并记录。", question, passages, subject_)
    assert checked.verdict == evidence.NOTHING_TO_CHECK
    assert checked.other_column == "L4 绝密"
    # Its own column's words: nothing to say against them.
    checked = evidence.check("用碎纸机销毁。", question, passages, subject_)
    assert checked.echoed is not None
    assert checked.other_column is None


def test_a_figure_from_another_column_of_the_row_is_not_the_answer() -> None:
    # The "wrong figure from the right passage": the row is about retention, L2 is in
    # it, and 5 is in it, but under L3.
    question = "L2 内部级文件要保存多久？"
    checked = evidence.check(
        "L2 内部级文件保存期限为 5 年。",
        question,
        {1: (RETENTION, "信息安全守则 / 数据分级")},
        subject_of(question),
    )
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.text for c in checked.unsupported] == ["5"]
    assert checked.quotes == {}
    # Headers alike but for the place: Munich's figure is no answer about Shanghai.
    question = "How much is a parking space at the Shanghai office?"
    checked = evidence.check(
        "A parking space costs EUR 90 a month.",
        question,
        {1: (PARKING, "Offices / Parking")},
        subject_of(question),
    )
    assert [c.text for c in checked.unsupported] == ["90"]
    # The column the question names holds it: supported and quoted.
    checked = evidence.check(
        "It costs 400 元 a month.",
        question,
        {1: (PARKING, "Offices / Parking")},
        subject_of(question),
    )
    assert checked.verdict == evidence.SUPPORTED
    assert [s.text for s in checked.quotes[1]] == [PARKING]


def test_columns_of_different_kinds_or_a_follow_ups_inherited_terms_name_no_column() -> None:
    # "Class" is a column the question names, but flight time is another kind of column.
    question = "When is business class allowed on a flight?"
    checked = evidence.check(
        "When the flight is more than 9 hours.",
        question,
        {1: (FLIGHTS, "Travel / Flights")},
        subject_of(question),
    )
    assert checked.verdict == evidence.SUPPORTED
    # A follow-up about L2 that inherited L3 from the question before it: L3's column is not
    # named by it, so 5 stays in another column than the one asked about.
    inherited = Subject({"l2": 1.0, "l3": 1.0, "保存": 1.0}, core=frozenset({"l2"}))
    checked = evidence.check(
        "保存期限为 5 年。",
        "那 L2 内部级的呢？",
        {1: (RETENTION, "信息安全守则 / 数据分级")},
        inherited,
    )
    assert [c.text for c in checked.unsupported] == ["5"]
    assert evidence.cells("The cap is EUR 160; in Paris EUR 220.") is None


INCIDENTS = (
    "A security incident is any event that may put our systems at risk: a phishing email you "
    "clicked, malware warnings, a lost device.\n"
    "Report every suspected incident within 2 hours of noticing it. Reporting too often is "
    "never a problem.\n"
    "Report to the Security Operations Centre on extension 4444."
)


def test_a_figure_of_the_kind_asked_beside_a_sentence_about_the_question_is_supported() -> None:
    # The passage names the phishing email once, and gives the deadline in the next sentence.
    question = "I clicked a link in a phishing email. How soon do I have to tell someone?"
    subject_ = subject_of(question, {"phishing": 3})
    passages = {1: (INCIDENTS, "IT Security / Reporting incidents")}
    checked = evidence.check("Within 2 hours of noticing it.", question, passages, subject_)
    assert checked.verdict == evidence.SUPPORTED
    assert [s.text for s in checked.quotes[1]] == [
        "Report every suspected incident within 2 hours of noticing it."
    ]
    # Two sentences away it is no longer the same thought, and an extension is no time.
    checked = evidence.check("Call 4444 at once.", question, passages, subject_)
    assert [c.text for c in checked.unsupported] == ["4444"]
    # A passage that never speaks of the strongest term lends its neighbours nothing.
    other = INCIDENTS.replace("a phishing email you clicked", "an email you clicked")
    checked = evidence.check(
        "Within 2 hours of noticing it.", question, {1: (other, "IT / Incidents")}, subject_
    )
    assert checked.verdict == evidence.UNSUPPORTED


def test_the_rows_around_the_one_asked_about_lend_it_no_figures() -> None:
    leave = (
        "Paid special leave is granted for these events:\n"
        "Event: Your own wedding; Paid days: 2 days\n"
        "Event: Death of a grandparent; Paid days: 1 day\n"
        "Event: Moving house; Paid days: 2 days"
    )
    question = "My grandparent has died. How many days off do I get?"
    checked = evidence.check(
        "You get 2 days.", question, {1: (leave, "Leave / Special leave")}, subject_of(question)
    )
    assert [c.text for c in checked.unsupported] == ["2"]


def test_a_follow_up_pointing_back_stays_about_the_subject_before_it() -> None:
    # "request that", after a question about working from the EU: the sabbatical's notice
    # period is about requests in advance, but not about working from abroad.
    abroad = (
        "You may work from another EU country for up to 20 days a year.\n"
        "Request it at least 4 weeks in advance."
    )
    sabbatical = (
        "A sabbatical is unpaid. Request it in advance, at least 3 months before it starts."
    )
    question = "How far in advance do I have to request that? (eu, country)"
    terms = {"advance": 1.0, "request": 0.6, "eu": 0.7, "country": 0.2}
    passages = {1: (abroad, "Remote work / Abroad"), 2: (sabbatical, "Leave / Sabbatical")}
    pointing = Subject(terms, core=frozenset({"advance", "request"}), carried=frozenset({"eu"}))
    checked = evidence.check("At least 3 months before.", question, passages, pointing)
    assert [c.text for c in checked.unsupported] == ["3"]
    checked = evidence.check("At least 4 weeks in advance.", question, passages, pointing)
    assert checked.verdict == evidence.SUPPORTED
    assert checked.cited == [1]
    # Without the pointer ("And for a sabbatical?") the earlier subject is not required.
    anew = Subject(terms, core=frozenset({"advance", "request"}))
    checked = evidence.check("At least 3 months before.", question, passages, anew)
    assert checked.verdict == evidence.SUPPORTED
    assert checked.cited == [2]


PASSWORDS = (
    "The rules for your Okta password are:\n"
    "At least 14 characters.\n"
    "No forced periodic change: change your password only when you suspect it has been exposed.\n"
    "The last 12 passwords cannot be reused."
)


def test_a_passage_read_out_word_for_word_is_no_invention() -> None:
    # Asked how often to change it, the model reads the whole list out: its other figures are
    # the documents' own, and the line about changing it is quoted though it holds no figure.
    question = "And how often do I have to change it? (password)"
    subject_ = Subject(
        {"change": 1.0, "password": 0.5},
        core=frozenset({"change"}),
        carried=frozenset({"password"}),
    )
    passages = {
        1: (PASSWORDS, "IT Security / Passwords"),
        2: ("Special leave: 2 days for a wedding.", "Leave policy / Special leave"),
    }
    reply = (
        "The rules for your Okta password are: At least 14 characters. No forced periodic "
        "change: change your password only when you suspect it has been exposed. The last 12 "
        "passwords cannot be reused."
    )
    checked = evidence.check(reply, question, passages, subject_)
    assert checked.verdict == evidence.SUPPORTED
    assert (
        "No forced periodic change: change your password only when you suspect it has been exposed."
        in [s.text for s in checked.quotes[1]]
    )
    # A figure the reply also states in words of its own is the model's claim, read out or not.
    checked = evidence.check(
        f"{reply} So you must change it every 12 months.", question, passages, subject_
    )
    assert [c.text for c in checked.unsupported] == ["12"]
    # Nor is a sentence copied from a passage that is not about what was asked.
    checked = evidence.check("Special leave: 2 days for a wedding.", question, passages, subject_)
    assert [c.text for c in checked.unsupported] == ["2"]


def test_a_clock_time_is_the_same_with_or_without_its_hours_leading_zero() -> None:
    assert evidence.figure_key("09:30") == evidence.figure_key("9:30") == "9:30"
    assert evidence.figure_parts(evidence.figure_key("09:00–18:00")) == ["9:00", "18:00"]
    assert evidence.figure_key("10:05") == "10:05"
    question = "When is arrival on my first day in Munich?"
    passages = {1: ("Arrival: 09:30 at the main reception, Building B.", "First day in Munich")}
    checked = evidence.check("Be at reception at 9:30.", question, passages, subject_of(question))
    assert checked.verdict == evidence.SUPPORTED


def test_a_section_the_reply_names_is_no_claim_when_a_passages_heading_has_it() -> None:
    question = "公司笔记本丢了，最迟多久要报告？"
    text = "笔记本丢失的，须在发现后 1 小时内报告。"
    subject = subject_of(question)
    reply = "根据第3.3节，笔记本丢失后最迟 1 小时内报告。"
    read = evidence.check(reply, question, {1: (text, "IT 守则 / 3. 设备 / 3.3 设备遗失")}, subject)
    assert read.verdict == evidence.SUPPORTED
    # A section no heading has is the reply's own, and a claim.
    elsewhere = evidence.check(reply, question, {1: (text, "IT 守则 / 5. 设备遗失")}, subject)
    assert [c.text for c in elsewhere.unsupported] == ["3.3"]
    # Chapters and sections numbered in Chinese: 第四章 … / 六、…
    headings = "员工手册 · 第四章 福利 / 六、交通与通讯补贴"
    assert evidence.heading_numbers([headings]) == {"4", "6"}
    assert evidence.without_headings("根据第4章第6节，每月 300 元。", {"4", "6"}).split() == [
        "根据",
        "，每月",
        "300",
        "元。",
    ]


def test_a_count_in_another_measure_word_is_not_what_was_asked() -> None:
    question = "公司发的加密 U 盘，PIN 码要设几位？"
    passages = {1: ("加密 U 盘（带 PIN 码）由 18 层 IT 服务台（1810 室）登记发放。", "USB")}
    reply = "PIN 码要设 18 层，到 1810 室领取。"
    checked = evidence.check(reply, question, passages, subject_of(question))
    assert checked.measure == "位"
    assert checked.verdict == evidence.UNSUPPORTED
    assert checked.mismatched == {"18": "层", "1810": "室"}
    assert not checked.quotes


SERVICE = (
    "Completed years of service: 0 to 2 years; Annual leave (working days): 27 days\n"
    "Completed years of service: 6 to 9 years; Annual leave (working days): 29 days\n"
    "Completed years of service: 10 years or more; Annual leave (working days): 30 days"
)


def test_a_row_whose_condition_leaves_out_the_quantity_asked_is_not_the_answer() -> None:
    # The row for ten years is about annual leave and holds 30, but the question is about
    # seven years: 30 is no answer for it, and citing the row would make it look checked.
    question = "How many days of annual leave do I get after 7 years of service?"
    rows = {1: (SERVICE, "Leave Policy / 2.1 Entitlement by length of service")}
    checked = evidence.check("You get 30 days.", question, rows, subject_of(question))
    assert checked.verdict == evidence.UNSUPPORTED
    assert [c.text for c in checked.unsupported] == ["30"]
    assert checked.quotes == {}
    # The row whose condition admits seven years supports its figure, and is quoted.
    checked = evidence.check("You get 29 days.", question, rows, subject_of(question))
    assert checked.verdict == evidence.SUPPORTED
    assert [s.text for s in checked.quotes[1]] == [SERVICE.splitlines()[1]]
    # Ten years, written out, is within the last row's condition.
    question = "How many days of annual leave do I get after ten years of service?"
    checked = evidence.check("You get 30 days.", question, rows, subject_of(question))
    assert checked.verdict == evidence.SUPPORTED
