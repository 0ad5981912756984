"""Markdown, read with markdown-it-py (CommonMark): headings open sections; paragraphs, list
items, table rows, quotes and code blocks become blocks of plain text (markup removed)."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from knowledge.parsers.base import (
    Block,
    Parsed,
    ParseError,
    SectionTracker,
    clean_line,
    join_lines,
    table_row_text,
)
from knowledge.parsers.text import decode_text

_md = MarkdownIt("commonmark").enable("table")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")


def html_text(html: str) -> str:
    """The words of raw HTML inside Markdown: its tags taken out (only tags: text that merely
    looks like markup stays)."""
    return join_lines([clean_line(line) for line in _TAG.sub(" ", html).split("\n")])


def _inline_text(token: Token) -> str:
    """The words of an inline token: text, code spans and link texts, without markup."""
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)
    return join_lines([clean_line(line) for line in "".join(parts).split("\n")])


def parse_markdown(data: bytes) -> Parsed:
    text = decode_text(data)
    tokens = _md.parse(text)
    sections = SectionTracker()
    blocks: list[Block] = []
    row: list[str] = []
    header: list[str] = []
    in_head = False
    heading_level: int | None = None
    previous = ""
    for token in tokens:
        in_cell, previous = previous in ("th_open", "td_open"), token.type
        if token.type == "heading_open":
            heading_level = int(token.tag[1:])
        elif token.type == "heading_close":
            heading_level = None
        elif token.type == "inline" and heading_level is not None:
            title = _inline_text(token)
            if title:
                blocks.append(Block(title, sections.enter(heading_level, title), heading=True))
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and in_cell:
            row.append(_inline_text(token))
        elif token.type == "thead_open":
            in_head = True
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "table_close":
            header = []
        elif token.type == "tr_close" and in_head:
            header = row
        elif token.type == "tr_close":
            text = table_row_text(header, row)
            if text:
                blocks.append(Block(text, sections.path))
        elif token.type == "inline":
            words = _inline_text(token)
            if words:
                blocks.append(Block(words, sections.path))
        elif token.type == "html_block":
            words = html_text(token.content)
            if words:
                blocks.append(Block(words, sections.path))
        elif token.type in ("fence", "code_block"):
            code = token.content.strip()
            if code:
                blocks.append(Block(code, sections.path))
    if not any(b.text for b in blocks):
        raise ParseError("The file holds no text.")
    title = next((b.text for b in blocks if b.heading), "")
    return Parsed(blocks=blocks, title=title)
