"""A passage cut into sentences, lines and table rows, each with its offsets in the passage's
text: what the support check (`knowledge.evidence`) reads and what the passage view highlights.
Pure functions, no database."""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- sentences --------------------------------------------------------------------------------

# After . ! ? and a space (English), after 。！？； (Chinese); a line break always ends one. Not
# before a digit ("approx. 20"), unless it starts a list item run into the line, as a PDF's text
# gives a numbered list ("…next week's run. 3. Employees of…"): the item's number belongs to the
# item, not to the sentence before it.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\s\d]|\d{1,2}[.)](?:\s+[^\s\d]|$))|(?<=[。！？；])")
# A list item's number ("3. ", "2) ") is no part of its sentence: not a figure it holds.
_ITEM_NUMBER = re.compile(r"^\d{1,2}[.)]\s+(?=[^\s\d])")
_BARE_ITEM_NUMBER = re.compile(r"\d{1,2}[.)]")
# "e.g. the", "approx. 20": not the end of a sentence.
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|approx|incl|excl|no|nr|vs|cf|ca|min|max)\.$", re.I)


@dataclass(frozen=True)
class Sentence:
    """A sentence (or line, or table row) of a passage, with where it stands in its text."""

    number: int  # the passage's number in the conversation
    start: int  # character offsets in the passage's text
    end: int
    text: str
    context: str = ""  # the passage's document title and section: what its sentences are about


def split_passage(number: int, text: str, context: str = "") -> list[Sentence]:
    """`text` cut into sentences: every line on its own (a list item, a table row), long lines
    at sentence ends; a list item's number left out."""
    out: list[Sentence] = []
    offset = 0

    def add(at: int, piece: str) -> None:
        item = _ITEM_NUMBER.match(piece)
        if item is not None:
            at, piece = at + item.end(), piece[item.end() :]
        if piece and not _BARE_ITEM_NUMBER.fullmatch(piece):  # "…run. 3." cut off its item
            out.append(Sentence(number, at, at + len(piece), piece, context))

    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped:
            lead = offset + (len(line) - len(line.lstrip()))
            start = 0
            body = line.strip()
            for match in _SENTENCE_END.finditer(body):
                piece = body[start : match.start()].rstrip()
                if _ABBREVIATION.search(piece) or _BARE_ITEM_NUMBER.fullmatch(piece):
                    continue
                add(lead + start, piece)
                start = match.end()
            add(lead + start, body[start:].rstrip())
        offset += len(line)
    return out
