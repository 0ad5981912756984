"""Which passages a reply rests on, found from what the reply says.

A 0.5B model told to cite passages as [2] answers "[2]" and stops, or copies a passage's
heading, and told to decline what the passages do not cover it declines most of what they do
(bench/rag_eval, docs/BENCHMARKS.md). So the model is asked only to answer from the passages,
and qassist finds the passages the reply's words come from, then cites them after the reply:

- The words the reply *adds* to its question (`knowledge.segment`: Latin-script words, whole
  numbers and identifiers, jieba's Chinese words), stop words aside.
- A passage supports the reply by the added words it holds: a figure or an identifier (a word
  with a digit, or a name such as `vpn.nwrobotics.example`, `NWR-Guest`) counts 3, any other
  word 1.
- Cited: the best passage, when it holds a figure or identifier, or two words; then each other
  passage that holds a figure, or three words, of those the passages cited already do not.
- A reply that cites passages itself ([2]) keeps its own citations.

Pure functions: no database, no model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from knowledge.prompt import cited_numbers
from knowledge.segment import STOPWORDS, words

FIGURE_WEIGHT = 3
FIRST_SUPPORT = 2  # the best passage is cited for a figure, or two of the reply's added words
MORE_SUPPORT = 3  # another one for a figure, or three words, that the cited ones do not hold
_FIGURE = re.compile(r"\d|[A-Za-z][.\-@_][A-Za-z0-9]")


def _weight(word: str) -> int:
    return FIGURE_WEIGHT if _FIGURE.search(word) else 1


def added_words(reply: str, question: str) -> set[str]:
    """The reply's words that its question does not hold (stop words and one-letter words
    aside)."""
    asked = set(words(question))
    return {
        w
        for w in words(reply)
        if w not in asked and w not in STOPWORDS and (len(w) > 1 or w.isdigit())
    }


def supporting(reply: str, question: str, passages: Mapping[int, str]) -> list[int]:
    """The numbers of the passages the reply rests on, best first (none: nothing it adds is in
    them). `passages`: number -> text, as the question was given them."""
    added = added_words(reply, question)
    if not added:
        return []
    held = {number: added & set(words(text)) for number, text in passages.items()}
    ranked = sorted(held, key=lambda n: (-sum(map(_weight, held[n])), n))
    cited: list[int] = []
    covered: set[str] = set()
    for number in ranked:
        new = held[number] - covered
        if sum(map(_weight, new)) < (MORE_SUPPORT if cited else FIRST_SUPPORT):
            continue
        cited.append(number)
        covered |= new
    return cited


def citation_suffix(reply: str, question: str, passages: Mapping[int, str]) -> str:
    """What to append to the reply: " [1]" or " [1][3]" for the passages it rests on, or "" when
    it cites passages given itself or rests on none."""
    if cited_numbers(reply) & set(passages):
        return ""
    numbers = supporting(reply, question, passages)
    if not numbers:
        return ""
    return " " + "".join(f"[{n}]" for n in sorted(numbers))
