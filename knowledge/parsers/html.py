"""HTML, read with lxml: h1–h6 open sections; paragraphs, list items, table rows (with their
column names), definition lists and preformatted text become blocks. Scripts, styles, forms,
navigation and everything hidden are left out."""

from __future__ import annotations

import re
from typing import Any

import lxml.html
from lxml import etree

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

_SKIP = {
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "form",
    "button",
    "select",
    "svg",
    "head",
}
_BLOCKS = {
    "p", "li", "dt", "dd", "blockquote", "pre", "figcaption", "caption", "address", "div",
    "section", "article", "main", "aside", "header", "footer", "ul", "ol", "dl", "table",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "br", "figure", "details", "summary",
}  # fmt: skip
_HEADING = re.compile(r"^h([1-6])$")
_META_CHARSET = re.compile(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_-]+)", re.IGNORECASE)


def _text_of(element: Any) -> str:
    lines = [clean_line(line) for line in element.text_content().split("\n")]
    return join_lines(lines)


def _is_block(element: Any) -> bool:
    return isinstance(element.tag, str) and element.tag in _BLOCKS and element.tag != "br"


def _hidden(element: Any) -> bool:
    style = (element.get("style") or "").replace(" ", "").lower()
    return element.get("hidden") is not None or "display:none" in style


def _decode(data: bytes) -> str:
    declared = _META_CHARSET.search(data[:4096])
    if declared and declared.group(1).lower() in (b"gbk", b"gb2312", b"gb18030"):
        try:
            return data.decode("gb18030")
        except UnicodeDecodeError:
            raise ParseError("The page says it is GB18030 (GBK) but is not.") from None
    return decode_text(data)


def parse_html(data: bytes) -> Parsed:
    text = _decode(data)
    try:
        root = lxml.html.document_fromstring(text)
    except (etree.ParserError, ValueError) as exc:
        raise ParseError(f"The HTML cannot be read: {exc}.") from None
    sections = SectionTracker()
    blocks: list[Block] = []

    def walk(element: Any) -> None:
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag in _SKIP or _hidden(element):
            return
        heading = _HEADING.match(tag)
        if heading:
            title = _text_of(element)
            if title:
                level = int(heading.group(1))
                blocks.append(Block(title, sections.enter(level, title), heading=True))
            return
        if tag == "table":
            _table(element)
            return
        if tag == "pre":
            code = element.text_content().strip()
            if code:
                blocks.append(Block(code, sections.path))
            return
        if not any(_is_block(child) for child in element.iterdescendants()):
            words = _text_of(element)
            if words:
                blocks.append(Block(words, sections.path))
            return
        # A container holding blocks: runs of its own text and inline children are
        # paragraphs of their own; block children are walked.
        run: list[str] = [element.text or ""]

        def flush() -> None:
            words = join_lines([clean_line(line) for line in "".join(run).split("\n")])
            if words:
                blocks.append(Block(words, sections.path))
            run.clear()

        for child in element:
            if _is_block(child) or any(_is_block(d) for d in child.iterdescendants()):
                flush()
                walk(child)
            elif isinstance(child.tag, str) and child.tag not in _SKIP and not _hidden(child):
                run.append(child.text_content())
            run.append(child.tail or "")
        flush()

    def _table(table: Any) -> None:
        header: list[str] = []
        for row in table.iter("tr"):
            cells = [_text_of(cell) for cell in row if cell.tag in ("td", "th")]
            if not header and all(cell.tag == "th" for cell in row if isinstance(cell.tag, str)):
                header = cells
                continue
            line = table_row_text(header, cells)
            if line:
                blocks.append(Block(line, sections.path))

    body = root.find("body")
    walk(body if body is not None else root)
    if not any(b.text for b in blocks):
        raise ParseError("The page holds no text.")
    title_element = root.find(".//title")
    title = _text_of(title_element) if title_element is not None else ""
    if not title:
        title = next((b.text for b in blocks if b.heading), "")
    return Parsed(blocks=blocks, title=title)
