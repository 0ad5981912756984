"""A passage cut into sentences, lines and table rows, each with its offsets in the passage's
text: what the support check (`knowledge.evidence`) reads and what the passage view highlights.
Pure functions, no database."""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- sentences --------------------------------------------------------------------------------

# After . ! ? and a space (English), after 。！？； (Chinese); a line break always ends one.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\s\d])|(?<=[。！？；])")
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
    at sentence ends."""
    out: list[Sentence] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped:
            lead = offset + (len(line) - len(line.lstrip()))
            start = 0
            body = line.strip()
            for match in _SENTENCE_END.finditer(body):
                piece = body[start : match.start()].rstrip()
                if _ABBREVIATION.search(piece):
                    continue
                if piece:
                    out.append(
                        Sentence(number, lead + start, lead + start + len(piece), piece, context)
                    )
                start = match.end()
            piece = body[start:].rstrip()
            if piece:
                out.append(
                    Sentence(number, lead + start, lead + start + len(piece), piece, context)
                )
        offset += len(line)
    return out
