"""What every parser returns, and the one error a parser raises.

A parser turns a file's bytes into blocks of text, each with the headings it sits under and
the page it is on, so chunks (and the citations built from them) can say "Hotels, page 2".
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ParseError(Exception):
    """The file cannot be read; the message is one line a person can act on."""


@dataclass(frozen=True)
class Block:
    text: str
    headings: tuple[str, ...] = ()  # the section path, outermost first
    page: int | None = None  # 1-based, where the format has pages
    heading: bool = False  # the block is itself a heading (its text ends `headings`)


@dataclass
class Parsed:
    blocks: list[Block] = field(default_factory=list)
    title: str = ""  # the document's own title, when it states one
    pages: int = 0  # pages, for formats that have them

    @property
    def text_chars(self) -> int:
        return sum(len(b.text) for b in self.blocks)


class SectionTracker:
    """The heading path while walking a document: a level-n heading replaces the headings at
    level n and below."""

    def __init__(self) -> None:
        self._levels: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> tuple[str, ...]:
        self._levels = [(lvl, t) for lvl, t in self._levels if lvl < level]
        self._levels.append((level, title))
        return self.path

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(t for _, t in self._levels)


def clean_line(text: str) -> str:
    """One line of text: whitespace runs (no-break spaces, tabs) made single spaces."""
    return " ".join(text.split())


def is_cjk(char: str) -> bool:
    """A Han character, kana, hangul or CJK punctuation: written without spaces between."""
    code = ord(char)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, hiragana, katakana
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xAC00 <= code <= 0xD7AF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x2FA1F
    )


def join_lines(lines: list[str]) -> str:
    """Wrapped lines of one paragraph as one: a space between words, none inside Chinese."""
    out = ""
    for line in lines:
        if not line:
            continue
        if out and not (is_cjk(out[-1]) and is_cjk(line[0])):
            out += " "
        out += line
    return out


def table_row_text(header: list[str], cells: list[str]) -> str:
    """A table row as a sentence-like line that keeps its column names ("City class: Tier 1;
    Hotel cap: EUR 180"): a row read alone, in a chunk, still says what its numbers are."""
    if header and len(header) == len(cells):
        pairs = [f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c]
        return "; ".join(pairs)
    return " | ".join(c for c in cells if c)
