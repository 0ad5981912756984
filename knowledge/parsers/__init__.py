"""Parsers by format, chosen from the file's bytes and name (`detect`): each turns a file into
blocks of text with their headings and pages (`knowledge.parsers.base`), or raises ParseError
with one line a person can act on. A parser module imports its library only when it runs."""

from __future__ import annotations

from collections.abc import Callable

from knowledge.parsers.base import Block, Parsed, ParseError
from knowledge.parsers.detect import DOCX, FORMATS, HTML, MARKDOWN, PDF, TEXT, detect


def _pdf(data: bytes) -> Parsed:
    from knowledge.parsers.pdf import parse_pdf

    return parse_pdf(data)


def _docx(data: bytes) -> Parsed:
    from knowledge.parsers.docx import parse_docx

    return parse_docx(data)


def _html(data: bytes) -> Parsed:
    from knowledge.parsers.html import parse_html

    return parse_html(data)


def _markdown(data: bytes) -> Parsed:
    from knowledge.parsers.markdown import parse_markdown

    return parse_markdown(data)


def _text(data: bytes) -> Parsed:
    from knowledge.parsers.text import parse_text

    return parse_text(data)


PARSERS: dict[str, Callable[[bytes], Parsed]] = {
    PDF: _pdf,
    DOCX: _docx,
    HTML: _html,
    MARKDOWN: _markdown,
    TEXT: _text,
}


def parse(data: bytes, kind: str) -> Parsed:
    """Parse `data` as `kind` (from `detect`). ParseError for anything the file's content does
    not allow, never another exception: a parser's own failure becomes a ParseError too."""
    try:
        return PARSERS[kind](data)
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("The file is nested too deeply to read.") from None
    except MemoryError:
        raise ParseError("The file is too large to read.") from None


__all__ = [
    "DOCX",
    "FORMATS",
    "HTML",
    "MARKDOWN",
    "PDF",
    "TEXT",
    "Block",
    "ParseError",
    "Parsed",
    "detect",
    "parse",
]
