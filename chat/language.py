"""Which language a text is in: generated titles checked against the question, a reply checked
against the language it must be in (chat.reply_language), a language named in instructions.

Lingua (a statistical detector built for short text) limited to the languages people here write
in: fewer candidates make fewer wrong guesses on a six-word title. Its models load on first use
(about a second, tens of MB), in the process that asks: the web process, after a first reply.
"""

from __future__ import annotations

import re
from functools import lru_cache

from lingua import Language, LanguageDetector, LanguageDetectorBuilder

LANGUAGES = (
    Language.ENGLISH,
    Language.CHINESE,
    Language.GERMAN,
    Language.FRENCH,
    Language.SPANISH,
    Language.ITALIAN,
    Language.PORTUGUESE,
    Language.DUTCH,
    Language.POLISH,
    Language.RUSSIAN,
    Language.JAPANESE,
    Language.KOREAN,
)
# How much more likely another language must be before a title counts as "not in the question's
# language": a short title is often ambiguous (a product name, "Q3 offsite"), and an ambiguous
# title is kept, not thrown away.
MARGIN = 0.5
_CJK_LANGUAGES = {Language.CHINESE, Language.JAPANESE, Language.KOREAN}
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@lru_cache(maxsize=1)
def _detector() -> LanguageDetector:
    return LanguageDetectorBuilder.from_languages(*LANGUAGES).build()


def language_of(text: str) -> Language | None:
    return _detector().detect_language_of(text)


def same_language(text: str, reference: str) -> bool:
    """False only when `text` is clearly in another language than `reference`; True when
    either is too short or too mixed to tell."""
    expected = language_of(reference)
    if expected is None:
        return True
    if expected in _CJK_LANGUAGES and not _CJK.search(text):
        return False  # a question in Chinese, Japanese or Korean named in Latin letters
    return _verdict(text, expected) is not False


def _verdict(text: str, expected: Language) -> bool | None:
    """Lingua's word on `text` being in `expected`: True when it is the likeliest language,
    False when another is likelier by MARGIN or more, None when it cannot say."""
    values = _detector().compute_language_confidence_values(text)
    if not values:
        return None
    best = values[0]
    if best.language == expected:
        return True
    own = next((v.value for v in values if v.language == expected), 0.0)
    return False if best.value - own >= MARGIN else None


# A reply's language is judged once it has this much text: enough letters for Lingua to be sure
# of a language (a few words are often several languages at once), or a few CJK characters.
JUDGED_LETTERS = 40
JUDGED_LETTERS_AT_SENTENCE_END = 20
JUDGED_CJK = 8
_LETTER = re.compile(r"[^\W\d_]")
_SENTENCE_END = re.compile(r"[.!?。！？:：]\s*$")
_CODE = re.compile(r"```.*?(```|$)|`[^`\n]*`", re.DOTALL)


def _letters(text: str) -> tuple[int, int]:
    """(letters, CJK characters) of `text`, code left out."""
    text = _CODE.sub(" ", text)
    letters = len(_LETTER.findall(text))
    return letters, len(_CJK.findall(text))


def judgeable(text: str) -> bool:
    """Enough of a reply to judge its language: `in_language` on less is a guess."""
    letters, cjk = _letters(text)
    if cjk >= JUDGED_CJK:
        return True
    if letters >= JUDGED_LETTERS:
        return True
    return letters >= JUDGED_LETTERS_AT_SENTENCE_END and bool(_SENTENCE_END.search(text))


def in_language(text: str, expected: Language) -> bool | None:
    """Is `text` in `expected`? None when it cannot be told (too short, or too mixed to say
    either way): only a clear "no" makes a reply be asked again."""
    letters, cjk = _letters(text)
    if letters == 0:
        return None
    share = cjk / letters
    if expected in _CJK_LANGUAGES:
        if share >= 0.3:
            return True
        return False if letters >= JUDGED_LETTERS_AT_SENTENCE_END and share < 0.1 else None
    if share >= 0.3:
        return False  # a Latin-script language expected, and the reply is Chinese
    if letters < JUDGED_LETTERS_AT_SENTENCE_END:
        return None
    return _verdict(_CODE.sub(" ", text), expected)


def question_language(text: str) -> Language | None:
    """The language a question is asked in; None when it cannot be told (a product name, "Q3?").
    CJK by its script (Lingua is unsure of a short Chinese question mixed with English names)."""
    letters, cjk = _letters(text)
    if cjk >= 2 and cjk / max(letters, 1) >= 0.2:
        if re.search(r"[\u3040-\u30ff]", text):
            return Language.JAPANESE
        if re.search(r"[\uac00-\ud7af]", text):
            return Language.KOREAN
        return Language.CHINESE
    if letters < 8:
        return None
    values = _detector().compute_language_confidence_values(text)
    if not values:
        return None
    best = values[0]
    runner_up = values[1].value if len(values) > 1 else 0.0
    return best.language if best.value - runner_up >= MARGIN else None


# A language named in instructions: "Always answer in French", "réponds en français",
# "Antworte auf Deutsch", "请用中文回答". Each language by its English name and its own.
_NAMES: dict[Language, tuple[str, ...]] = {
    Language.ENGLISH: ("english", "anglais", "englisch", "英文", "英语"),
    Language.CHINESE: ("chinese", "mandarin", "chinois", "chinesisch", "中文", "汉语", "普通话"),
    Language.GERMAN: ("german", "deutsch", "allemand", "德语", "德文"),
    Language.FRENCH: ("french", "français", "francais", "französisch", "法语", "法文"),
    Language.SPANISH: ("spanish", "español", "espanol", "espagnol", "spanisch", "西班牙语"),
    Language.ITALIAN: ("italian", "italiano", "italien", "italienisch", "意大利语"),
    Language.PORTUGUESE: ("portuguese", "português", "portugues", "portugais", "葡萄牙语"),
    Language.DUTCH: ("dutch", "nederlands", "néerlandais", "niederländisch", "荷兰语"),
    Language.POLISH: ("polish", "polski", "polonais", "polnisch", "波兰语"),
    Language.RUSSIAN: ("russian", "русский", "russe", "russisch", "俄语"),
    Language.JAPANESE: ("japanese", "日本語", "japonais", "japanisch", "日语"),
    Language.KOREAN: ("korean", "한국어", "coréen", "koreanisch", "韩语"),
}
_NAME_TO_LANGUAGE = {name: language for language, names in _NAMES.items() for name in names}
_ALL_NAMES = "|".join(sorted(map(re.escape, _NAME_TO_LANGUAGE), key=len, reverse=True))
# A verb of answering or writing, then within a few words "in/en/auf/na/em <language>"; or
# "<language> only" / "only <language>"; or a Chinese 用…回答/回复.
_NAMED = (
    re.compile(
        r"\b(?:answer|reply|respond|write|speak|talk|use|répon\w*|écri\w*|antwort\w*|schreib\w*|"
        r"respond\w*|contest\w*|escrib\w*|scriv\w*|rispond\w*|antwoord\w*)\b"
        rf"[^.\n]{{0,40}}?\b(?:in|en|auf|in het|em|na|po)?\s*({_ALL_NAMES})\b",
        re.IGNORECASE,
    ),
    re.compile(
        rf"\b(?:only|always|solo|nur|seulement|uniquement)\s+(?:in\s+)?({_ALL_NAMES})\b",
        re.IGNORECASE,
    ),
    re.compile(rf"\b({_ALL_NAMES})\s+only\b", re.IGNORECASE),
    re.compile(
        r"(?:用|以|使用|翻译成|翻译为|译成|翻成)\s*"
        r"(中文|汉语|普通话|英文|英语|德语|德文|法语|法文|日语|韩语|西班牙语)"
    ),
    # A translation asked for: "Translate this into English", "traduis en anglais".
    re.compile(
        r"\b(?:translate|translation|tradui\w*|traduc\w*|übersetz\w*|tradu\w*|vertaal\w*)\b"
        rf"[^\n]{{0,80}}?\b(?:in|into|to|en|auf|ins|in het|em|na|al|a)\s+({_ALL_NAMES})\b",
        re.IGNORECASE,
    ),
)


def named_language(instructions: str) -> Language | None:
    """The language instructions ask replies to be in, if they name one ("Always answer in
    French"); the first one named wins ("Answer in English, never in French"). A language
    merely mentioned ("I work with German clients") is not an instruction."""
    found: list[tuple[int, Language]] = []
    for pattern in _NAMED:
        for match in pattern.finditer(instructions):
            language = _NAME_TO_LANGUAGE.get(match.group(1).lower())
            if language is not None:
                found.append((match.start(1), language))
    return min(found, key=lambda item: item[0])[1] if found else None


def language_name(language: Language) -> str:
    """The language's English name, as an instruction to the model says it: "French"."""
    return language.name.capitalize()
