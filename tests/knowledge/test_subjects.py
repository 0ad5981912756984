"""What a question is about (`knowledge.subjects`): its terms, and where a sentence holds them."""

import pytest

from knowledge import subjects
from knowledge.sentences import Sentence
from knowledge.subjects import Subject


def subject_of(question: str, rare: dict[str, int] | None = None) -> Subject:
    # Every term weighs 1 unless said otherwise (the product weighs by rarity: support.py).
    weights = rare or {}
    return subjects.subject(question, lambda term: float(weights.get(term, 1)))


def test_contractions_the_measure_after_how_and_currency_names_are_not_the_subject() -> None:
    # Held-out answers were warned for want of "what's", "large" or "欧元" in the sentence
    # that held their figure ("USD 18 million" for "How large is the break fee...?").
    assert subjects.subject_terms(
        "I'm a field service lead. What's the monthly limit on my company card?"
    ) == ["field", "service", "lead", "monthly", "limit", "card"]
    assert subjects.subject_terms("How large is the break fee Globex would pay?") == [
        "break",
        "fee",
        "globex",
    ]
    assert "欧元" not in subjects.subject_terms("报销时金额超过多少欧元必须附上收据？")
    assert "收据" in subjects.subject_terms("报销时金额超过多少欧元必须附上收据？")
    # The form of the answer is not what it is about: the VPN's gateway is its hostname.
    assert subjects.subject_terms("What is the hostname of the company VPN?") == ["vpn"]
    assert subjects.subject_terms("On which weekday are expenses paid?") == ["expenses"]


def test_negated_verbs_conjunctions_and_pronouns_are_not_the_subject() -> None:
    # "once" and "don't" were the question's strong terms, absent from every passage.
    assert subjects.subject_terms(
        "Once I've put in a leave request, how long does my manager have to decide?"
    ) == ["put", "leave", "request", "manager", "decide"]
    assert subjects.subject_terms("And if they don't answer in time?") == ["answer"]
    assert "her" not in subjects.subject_terms("How many days can I take off to look after her?")


def test_a_sentence_speaks_of_the_strongest_term_and_may_lack_a_little_of_the_rest() -> None:
    # The booking tool's name is not in the sentence that holds the rule about hotels' own
    # websites: it lacks a quarter of the strong terms' weight, and still speaks of them.
    subject = subjects.Subject({"hotel's": 2.6, "booking": 1.6, "tool": 1.3, "website": 0.9})
    present = {"hotel's", "booking", "website"}
    assert subject.strong(0.5) == {"hotel's", "booking", "tool"}
    assert subject.spoken_of(present, 0.5, missing=0.25)
    assert not subject.spoken_of(present, 0.5, missing=0.0)  # every strong term, as before
    # A coworking membership is not a gym membership: the strongest term may never be missing.
    gym = subjects.Subject({"gym": 1.45, "membership": 1.41})
    assert not gym.spoken_of({"membership"}, 0.5, missing=0.5)
    assert gym.spoken_of({"gym", "membership"}, 0.5, missing=0.0)


def test_prepositions_and_chinese_measure_words_are_not_the_subject() -> None:
    assert subjects.subject_terms("How much does the company pay towards a gym membership?") == [
        "gym",
        "membership",
    ]
    terms = subjects.subject_terms("充电车位充完电以后，要在多长时间内把车挪走？")
    assert "车位" in terms
    assert not {"多长时间", "长时间", "时间"} & set(terms)


def test_an_acronym_is_present_where_a_sentence_spells_it_out() -> None:
    abroad = "Allowed countries: member states of the European Union and Switzerland."
    subject_ = subject_of("May I work from an EU country?", {"eu": 3})
    present = subjects.lexical_presence(subject_)(
        [Sentence(1, 0, len(abroad), abroad), Sentence(1, 0, 9, "Every use.")]
    )
    assert "eu" in present[0]
    assert "eu" not in present[1]


@pytest.mark.parametrize(
    ("term", "text"),
    [("expense", "Expenses policy"), ("tax", "Taxes are withheld."), ("fee", "Fees apply.")],
)
def test_a_term_is_present_in_its_plural(term: str, text: str) -> None:
    subject_ = Subject({term: 1.0})
    assert subjects.lexical_presence(subject_)([Sentence(1, 0, len(text), text)]) == [{term}]


def test_the_parts_of_a_present_chinese_word_are_present() -> None:
    subject = Subject({"笔记": 1.6, "笔记本": 1.8, "服务": 0.2, "服务台": 1.0, "laptop": 1.0})
    assert subject.with_parts({"笔记本"}) == {"笔记本", "笔记"}
    # The whole is not present for its part: 笔记 (notes) is no 笔记本 (a laptop).
    assert subject.with_parts({"笔记"}) == {"笔记"}
    assert subject.with_parts({"服务台", "laptop"}) == {"服务台", "服务", "laptop"}


def test_words_that_name_the_form_of_the_answer_are_not_the_subject() -> None:
    assert subjects.subject_terms("Which client software do I need to connect to it?") == [
        "client",
        "connect",
    ]
    assert subjects.subject_terms("How many days a week am I allowed to work from home?") == [
        "home"
    ]


def test_a_weekday_is_in_a_range_of_days_that_holds_it() -> None:
    assert subjects.in_day_range("wednesday", "Day: Monday to Thursday; Core hours: 10:00-15:00")
    assert subjects.in_day_range("Tuesdays", "Open Mon–Fri, 9:00-17:00")
    assert subjects.in_day_range("周三", "工作日（周一至周五）9:00 开门")
    assert not subjects.in_day_range("friday", "Day: Monday to Thursday")
    assert not subjects.in_day_range("saturday", "Mon-Fri")
    assert not subjects.in_day_range("meeting", "Monday to Thursday")
    assert subjects.calendar_word("三月")
    assert subjects.calendar_word("march")
    assert not subjects.calendar_word("marching")


def test_a_verb_of_the_question_is_core_where_a_heading_names_its_topic_by_it() -> None:
    # 体检 is read as a verb; under "四、年度体检" it names what the section is about.
    question = Subject({"免费": 0.6, "体检": 1.7, "最晚": 2.3}, core=frozenset({"免费"}))
    asked = Subject(question.terms, question.core, verbs=frozenset({"体检"}))
    assert asked.strong(0.5) == {"免费"}
    headed = asked.headed("员工手册 / 四、年度体检")
    assert headed.strong(0.5) == {"体检"}
    assert headed.spoken_of({"体检"}, 0.5, 0.25)
    assert asked.headed("员工手册 / 三、餐饮补贴") is asked
    # A question with no core (every term counts) has nothing to add.
    assert Subject(question.terms, verbs=frozenset({"体检"})).headed("四、年度体检").core is None
