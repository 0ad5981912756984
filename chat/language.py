"""Which language a short text is in, for checking generated titles against the question.

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
    values = _detector().compute_language_confidence_values(text)
    if not values:
        return True
    best = values[0]
    if best.language == expected:
        return True
    own = next((v.value for v in values if v.language == expected), 0.0)
    return best.value - own < MARGIN
