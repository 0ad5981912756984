"""Matching questions to staff-curated cached replies."""

from __future__ import annotations

import re
import unicodedata

_PUNCT_EDGES = re.compile(r"^[\s\W_]+|[\s\W_]+$", re.UNICODE)
_SPACES = re.compile(r"\s+", re.UNICODE)


def normalize_question(text: str) -> str:
    """Case-, width- and whitespace-insensitive key; trailing punctuation (?, ？, !) ignored.

    NFKC folds full-width forms (Ｑ, ？) so Chinese and English input typed either way match.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = _SPACES.sub(" ", folded)
    return _PUNCT_EDGES.sub("", folded)[:512]
