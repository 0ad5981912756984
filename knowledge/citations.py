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
- A reply that rests on none of its passages but states something of its own (a figure or an
  identifier, or two words, that no passage holds, words about the passages aside) gets a note
  instead: not found in the documents, check it. A 0.5B model told to decline what its passages
  do not cover declines most of what they do, so it is not told to; it answers, and the note
  says when the answer did not come from the documents (an invented CEO, a gym's opening hours).

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


# Words a reply uses about the passages themselves or to decline ("the passages do not mention
# it", "I cannot say"): they state nothing that needs a source.
META = frozenset(
    [
        "passage",
        "passages",
        "document",
        "documents",
        "text",
        "context",
        "information",
        "mention",
        "mentions",
        "mentioned",
        "cover",
        "covers",
        "covered",
        "provide",
        "provided",
        "provides",
        "specific",
        "details",
        "detail",
        "sorry",
        "unfortunately",
        "cannot",
        "can't",
        "unable",
        "say",
        "know",
        "sure",
        "answer",
        "question",
        "find",
        "found",
        "available",
        "段落",
        "文档",
        "资料",
        "信息",
        "提到",
        "提及",
        "涉及",
        "抱歉",
    ]
)
# How a reply says the documents do not answer (the model itself, or qassist's own texts).
DECLINES = (
    "do not cover",
    "don't cover",
    "does not cover",
    "doesn't cover",
    "not covered",
    "no passage",
    "not mention",
    "does not say",
    "do not say",
    "don't say",
    "could not find",
    "couldn't find",
    "cannot find",
    "can't find",
    "no information",
    "not in the documents",
    "not found",
    "没有涉及",
    "未涉及",
    "没有提到",
    "未提及",
    "没有找到",
    "未找到",
    "没有相关",
    "无法找到",
    "文档中没有",
    "没有说明",
)


def declines(reply: str) -> bool:
    """Whether the reply says that the documents do not answer."""
    low = reply.lower()
    return any(phrase in low for phrase in DECLINES)


NOT_FOUND_NOTE = (
    "\n\n*Not found in the documents: none of the passages found for this question says this; "
    "check it before relying on it.*"
)
NOT_FOUND_NOTE_ZH = (
    "\n\n*文档中没有找到依据：为这个问题找到的段落都没有提到这一点，请核实后再使用。*"
)
_CJK = re.compile(r"[\u4e00-\u9fff]")


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


def unsupported(reply: str, question: str, passages: Mapping[int, str]) -> bool:
    """Whether the reply states something of its own that no passage holds (a figure or an
    identifier, or two words, words about the passages aside) and rests on none of them."""
    if supporting(reply, question, passages):
        return False
    held: set[str] = set()
    for text in passages.values():
        held |= set(words(text))
    own = added_words(reply, question) - held - META
    return sum(map(_weight, own)) >= FIRST_SUPPORT


def citation_suffix(reply: str, question: str, passages: Mapping[int, str]) -> str:
    """What to append to the reply: " [1]" or " [1][3]" for the passages it rests on; the
    not-found note when it states things none of them holds; "" when it cites passages given
    itself, or adds nothing to check."""
    if cited_numbers(reply) & set(passages):
        return ""
    numbers = supporting(reply, question, passages)
    if numbers:
        return " " + "".join(f"[{n}]" for n in sorted(numbers))
    if unsupported(reply, question, passages):
        return NOT_FOUND_NOTE_ZH if _CJK.search(reply) else NOT_FOUND_NOTE
    return ""


SNIPPET_CHARS = 240  # a source's preview under a reply


def snippet(text: str) -> str:
    """A passage's text on one line, cut to a preview."""
    line = " ".join(text.split())
    return line if len(line) <= SNIPPET_CHARS else line[: SNIPPET_CHARS - 1].rstrip() + "…"
