"""A follow-up made standalone, for retrieval and for the support check.

"And how often do I have to change it?" says nothing of passwords: searched alone it found
nothing, and the chat labelled the reply "not from the company's documents" although the
conversation's passages held the answer. A follow-up is read with the subject of the question
before it: the earlier question's subject words it does not repeat are added to it, so "And how
often do I have to change it? (password, length)" is searched, and checked against sentences
about passwords.

Asking the model to rewrite the question would cost a generation per turn (seconds on two
cores); the conversation's own words do this job for the questions employees ask.

Pure functions: no database, no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from knowledge.asked import asked_kind
from knowledge.segment import words
from knowledge.subjects import subject_terms

# Words that point back into the conversation: a question holding one needs its predecessor.
_ANAPHORA = frozenset(
    """
    it its it's they them their those these that this there ones same such
    instead also too else other another either former latter above
    它 它们 这 那 这个 那个 这些 那些 该 其 此 上述 同样 也 还 呢 那么
    """.split()  # noqa: SIM905 - a word list reads best as words
)
_OPENERS = re.compile(
    r"^\s*(?:and|or|but|so|what about|how about|and if|what if|same for|also)\b"
    r"|^\s*(?:那|还有|另外|如果|那么)",
    re.IGNORECASE,
)
# "one" stands for something said before only where no noun follows it: "Is there one for
# interns?", "Which one?", but not "Name one colour." (a numeral).
_ONE = re.compile(
    r"\bone(?=\s*(?:[?.!,;:]|$)|\s+(?:for|of|in|with|that|which|at|on|to|is|are)\b)",
    re.IGNORECASE,
)
# Pronouns that stand for what the question before was about ("request that", "change it",
# "use them"), as against words that bring a new case in ("And for Amsterdam instead?", "那 L2
# 内部级的呢？").
_POINTERS = frozenset(
    """
    it its it's they them their that this these those
    它 它们 其 该 上述 这个 那个 这些 那些
    """.split()  # noqa: SIM905 - a word list reads best as words
)
# A question with at most this many subject words of its own leans on the one before it.
SHORT = 2


def is_marked(question: str) -> bool:
    """Whether `question` says that it leans on the conversation: an opener ("And for
    Amsterdam?", "What about trains?", "那上海呢？") or a word pointing back ("How often do I have
    to change it?")."""
    if _OPENERS.search(question) or _ONE.search(question):
        return True
    return any(w in _ANAPHORA for w in words(question))


def points_back(question: str) -> bool:
    """Whether `question` names what it asks about by a pronoun (`_POINTERS`): it is still
    about what the question before it was about."""
    return any(w in _POINTERS for w in words(question))


def is_follow_up(question: str) -> bool:
    """Whether `question` leans on the conversation before it: marked as such (`is_marked`),
    or too short to stand alone ("Amsterdam?", "How long?"). A short question may be a new one
    ("Name one colour."): only a marked follow-up is judged as its standalone form and rests on
    the conversation's passages (knowledge.turns)."""
    if is_marked(question):
        return True
    return len(subject_terms(question)) <= SHORT and len(words(question)) <= 8


def inherited(question: str, earlier: Sequence[str]) -> list[str]:
    """The subject words a follow-up takes from the question before it (made standalone the
    same way) and does not have itself; none for a question that stands on its own."""
    earlier = [q for q in earlier if q.strip()]
    if not earlier or not is_follow_up(question):
        return []
    previous = standalone(earlier[-1], earlier[:-1])
    own = set(words(question))
    return [t for t in subject_terms(previous) if t not in own]


# A question word: a question holding one asks something of its own.
_ASKS = re.compile(
    r"\b(?:what|which|how|when|where|who|whom|whose|why)\b|什么|几|多少|哪|怎么|怎样|如何|多久|何时|谁",
    re.IGNORECASE,
)


def kind_asked(question: str, earlier: Sequence[str]) -> str | None:
    """The kind of figure `question` asks for (knowledge.asked); for a follow-up that asks the
    question before it again for another case, with no question word of its own ("And if the
    trip is to Amsterdam instead?", "那如果是在埃因霍温入职呢？"), that question's kind."""
    kind = asked_kind(question)
    earlier = [q for q in earlier if q.strip()]
    if kind is not None or not earlier or _ASKS.search(question) or not is_marked(question):
        return kind
    return kind_asked(earlier[-1], earlier[:-1])


def standalone(question: str, earlier: Sequence[str]) -> str:
    """`question` as it reads on its own: with the subject words of the question before it
    (made standalone the same way) that it lacks, when it is a follow-up; else unchanged."""
    added = inherited(question, earlier)
    if not added:
        return question
    sep = "，" if any("\u4e00" <= c <= "\u9fff" for c in question) else ", "
    return f"{question.rstrip()} ({sep.join(added)})"
