"""Which of a question's terms a sentence speaks of, with the real embedder (knowledge.support):
the same word, its translation across scripts, a code by its own letters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from knowledge import subjects, support
from knowledge.embeddings import UseEmbedder, set_embedder
from knowledge.sentences import split_passage


@pytest.fixture(autouse=True)
def real_embedder(fake_embedder: object) -> Iterator[None]:
    # The product's embedder (USE multilingual v3, in numpy): the thresholds are its own.
    set_embedder(UseEmbedder(threads=1))
    yield
    set_embedder(None)


def _present(question: str, sentence: str, context: str = "") -> set[str]:
    subject = subjects.subject(question)
    return support.presence(subject)(split_passage(1, sentence, context))[0]


def test_a_chinese_term_is_found_in_its_english_translation() -> None:
    # 病假 / sickness: 0.64 by the embedder, below the 0.7 of a same-script match.
    present = _present(
        "请病假从第几天开始需要医生证明？",
        "If the sickness lasts more than 2 calendar days, a medical certificate is required.",
    )
    assert "病假" in present


def test_a_chinese_place_is_not_found_in_another_english_one() -> None:
    present = _present(
        "那如果是在埃因霍温入职呢？",
        "In Munich, arrival is at 08:30 at the reception of Building A.",
    )
    assert "埃因霍温" not in present


def test_a_code_is_found_by_its_letters_and_not_by_a_neighbour() -> None:
    question = "出差去 D 类城市，酒店每晚的上限是多少？"
    assert "d" in subjects.subject_terms(question)
    assert "d" not in _present(question, "City class: Class C; Cap per night: EUR 115", "Hotels")
    assert "d" in _present(question, "City class: Class D; Cap per night: EUR 90", "Hotels")
    assert subjects.subject_terms("那 L2 内部级的呢？") == ["内部", "l2"]
    assert "l2" not in _present("那 L2 内部级的呢？", "L3 机密: 合同结束后 5 年")


def test_a_short_latin_term_is_found_as_written_or_spelt_out_not_by_the_embedder() -> None:
    # Two letters are next to nothing to the embedder: it once found "EU" in this sentence.
    question = "How many days a year may I work from another EU country?"
    assert "eu" not in _present(question, "Request it at least 4 weeks in advance.")
    assert "eu" in _present(question, "Allowed: member states of the European Union.")
    assert "eu" in _present(question, "Working from an EU member state is allowed.")


def test_a_short_word_the_lexicon_knows_is_found_by_the_embedder() -> None:
    # "ill" has three letters, like an acronym, but it is a word: "sick" says it (0.85).
    question = "My 8-year-old is ill and has to stay home. How many paid days can I take?"
    assert "ill" in _present(question, "When a child under 12 is sick and needs care at home.")
    assert "ill" not in _present(question, "Remote days cannot be saved up for later weeks.")


def test_a_term_is_found_in_the_singular_of_a_plural_the_sentence_holds() -> None:
    # "fly" is 0.67 from "Flights" by the embedder and 0.81 from "flight".
    question = "How many bags can I check in when I fly to a customer?"
    sentence = "Field service technicians may check up to two bags plus tool cases."
    assert "fly" in _present(question, sentence, "Travel Policy / 4.1 Flights")
    assert "fly" not in _present(question, sentence, "Travel Policy / 5. Hotels")


def test_a_chinese_place_and_its_english_name_are_one_term() -> None:
    # 慕尼黑 / Munich: 0.605 by the embedder; 前台 / reception 0.612 (the threshold is 0.60).
    present = _present(
        "在慕尼黑入职第一天早上几点到前台报到？",
        "Arrival: 09:30 at the main reception, Building B.",
        "Onboarding / 2. Your first day in Munich",
    )
    assert {"慕尼黑", "前台"} <= present


def test_the_parts_of_a_chinese_word_are_present_with_it() -> None:
    # jieba cuts 笔记本 both ways: 笔记本 and 笔记. A sentence about a laptop speaks of both.
    question = "公司笔记本丢了，最迟多久要报告 IT 服务台？"
    assert {"笔记", "笔记本"} <= set(subjects.subject_terms(question))
    present = _present(question, "Report a lost or stolen laptop to the IT helpdesk at once.")
    assert {"笔记", "笔记本"} <= present


def test_a_place_the_embedder_places_far_is_its_translation_by_the_dictionary() -> None:
    # 埃因霍温 / Eindhoven: 0.37 by the embedder, further apart than Eindhoven / Munich (0.43).
    question = "那如果是在埃因霍温入职呢？"
    assert "埃因霍温" in _present(question, "In Eindhoven, arrival is at 09:00 at reception.")
    assert "eindhoven" in _present(
        "What time do I arrive on my first day in Eindhoven?", "在埃因霍温，报到时间是 09:00。"
    )


def test_a_chinese_term_is_found_where_every_word_of_one_of_its_senses_is() -> None:
    # 加班 / overtime: 0.55 by the embedder; the dictionary's sense is "to work overtime".
    question = "周末加班有补休吗？"
    assert "加班" in _present(question, "Overtime work on a weekend is compensated with time off.")
    assert "加班" not in _present(question, "Work on a weekend needs your manager's approval.")


def test_a_weekday_is_found_as_written_or_in_a_range_never_by_the_embedder() -> None:
    question = "On a Wednesday, until when must I be available for meetings?"
    # Wednesday and Friday are over 0.7 apart by the embedder: a holiday on a Friday is not it.
    assert "wednesday" not in _present(question, "Date: Friday 20 June; Holiday: Founders' Day")
    assert "wednesday" in _present(question, "Day: Monday to Thursday; Core hours: 10:00-15:00")
    assert "wednesday" in _present(question, "Date: Wednesday 24 December; Holiday: Christmas Eve")
