"""A Chinese word's English senses (knowledge.glossary), parsed from CC-CEDICT's lines."""

from __future__ import annotations

from knowledge import glossary

LINES = [
    "證明 证明 [zheng4 ming2] /proof/certificate/identification/CL:個|个[ge4]/to prove/",
    "隨身 随身 [sui2 shen1] /to (carry) on one's person/to (take) with one/",
    "次 次 [ci4] /next in sequence/second/classifier for enumerated events: time/",
    "信用卡 信用卡 [xin4 yong4 ka3] /credit card/",
    "王 王 [Wang2] /surname Wang/",
    "埃因霍溫 埃因霍温 [Ai1 yin1 huo4 wen1] /Eindhoven (city in the Netherlands)/",
]


def test_senses_keep_their_content_words_and_drop_asides_and_notes() -> None:
    senses = {w: glossary.senses_of(g) for w, g in glossary.entries(LINES).items()}
    assert set(senses["证明"]) == {
        frozenset({"proof"}),
        frozenset({"certificat"}),
        frozenset({"identification"}),
        frozenset({"prov"}),
    }
    assert senses["随身"] == (frozenset({"person"}),)  # "to (take) with one" says nothing
    assert senses["信用卡"] == (frozenset({"credit", "card"}),)
    assert senses["埃因霍温"] == (frozenset({"eindhoven"}),)
    assert "次" not in senses  # one character: too many senses to tell apart


def test_a_chinese_word_is_in_english_text_only_with_every_word_of_a_sense() -> None:
    assert glossary.in_english("信用卡", {"pay", "credit", "card"})
    assert not glossary.in_english("信用卡", {"credit", "limit"})
    assert glossary.in_english("现金", {glossary.stem("Cash"), "withdrawal"})


def test_an_english_word_is_in_chinese_text_where_a_word_has_it_as_a_whole_sense() -> None:
    assert glossary.in_chinese("Eindhoven", ["在", "埃因霍温", "报到"])
    assert glossary.in_chinese("certificates", ["证明"])
    assert not glossary.in_chinese("Munich", ["埃因霍温"])
