"""The keys cached replies are matched by: a question set aside from how people happen to type
it (case, full and half width, punctuation, spaces), and every key a reply answers. Pure text
rules: the model, the index (chat/cache.py), the CSV import and feedback all match by them."""

from __future__ import annotations

import unicodedata
from typing import Protocol


class Phrased(Protocol):
    """What a reply's keys come from (a CachedReply, or a row of an import being checked)."""

    question: str
    alternatives: str


MAX_KEY_CHARS = 512

# Punctuation that carries meaning in a question ("C#", "50%", "R&D", "a/b", "x*y"): kept.
_MEANINGFUL = frozenset("#%&@*/\\_+")
_APOSTROPHES = frozenset("'’‘`")


def _is_wide(char: str) -> bool:
    """Chinese, Japanese and Korean characters: words are not separated by spaces there."""
    return unicodedata.east_asian_width(char) in ("W", "F")


def normalize_question(text: str) -> str:
    """The key a question is matched by: exact, after setting aside what people type either way.

    - case (casefold) and full-width / half-width forms (NFKC: Ｑ → q, ？ → ?);
    - punctuation, Chinese and Latin alike (，。？！、「」 , . ? ! ; : " ( ) …), wherever it is,
      except where it carries meaning: # % & @ * / \\ _ + and a . or , between digits (1.5);
    - apostrophes are dropped (what's = whats);
    - spaces: runs become one, none at the ends, none next to a Chinese/Japanese/Korean character
      ("VPN 地址" = "VPN地址").
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    chars: list[str] = []
    for index, char in enumerate(folded):
        if char in _APOSTROPHES:
            continue
        category = unicodedata.category(char)
        if category[0] == "P" and char not in _MEANINGFUL:
            between_digits = (
                char in ".,"
                and 0 < index < len(folded) - 1
                and folded[index - 1].isdigit()
                and folded[index + 1].isdigit()
            )
            chars.append(char if between_digits else " ")
        elif char.isspace() or category[0] in ("Z", "C"):
            chars.append(" ")
        else:
            chars.append(char)
    words = "".join(chars).split()
    if not words:
        return ""
    key = words[0]
    for word in words[1:]:
        key += word if _is_wide(key[-1]) or _is_wide(word[0]) else " " + word
    return key[:MAX_KEY_CHARS]


def phrasings(question: str, alternatives: str) -> list[str]:
    """The question and each non-empty line of the alternatives, as typed."""
    lines = [line.strip() for line in alternatives.splitlines()]
    return [question, *(line for line in lines if line)]


def reply_keys(reply: Phrased) -> list[str]:
    """Every key `reply` answers, its question's first, without duplicates or empty keys."""
    keys: list[str] = []
    for phrasing in phrasings(reply.question, reply.alternatives):
        key = normalize_question(phrasing)
        if key and key not in keys:
            keys.append(key)
    return keys
