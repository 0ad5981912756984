"""PDF, read with pypdfium2 (PDFium, the engine of Chrome's viewer): fast on two cores, robust
to damaged files, and it reads CJK text. Every block keeps its page number for citations.

PDFs have no headings, only bigger or bolder text: a short line set clearly larger than the
page's body text, or bold and on a line of its own, or numbered like "3.2 Hotels", opens a
section. Paragraphs are lines joined until a blank line or a gap.
"""

from __future__ import annotations

import ctypes
import re
from collections import Counter
from typing import Any

from knowledge.parsers.base import Block, Parsed, ParseError, SectionTracker, clean_line, join_lines
from knowledge.parsers.limits import check_pdf_streams
from knowledge.parsers.text import heading_level

MAX_PAGES = 2_000
_LARGER = 1.15  # a line this much larger than the body text is a heading


def parse_pdf(data: bytes, *, max_pages: int = MAX_PAGES) -> Parsed:
    check_pdf_streams(data)  # PDFium would unpack a bomb whole (knowledge/parsers/limits.py)
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc).lower()
        if "password" in message:
            raise ParseError(
                "The PDF is encrypted with a password: upload a copy without protection."
            ) from None
        raise ParseError("The PDF is damaged and cannot be read.") from None
    try:
        pages = len(document)
        if pages > max_pages:
            raise ParseError(f"The PDF has {pages:,} pages; the limit is {max_pages:,}.")
        lines_by_page: list[list[tuple[str, float, bool]]] = []
        for index in range(pages):
            page = document[index]
            try:
                textpage = page.get_textpage()
                try:
                    lines_by_page.append(_lines(textpage, pdfium_c))
                finally:
                    textpage.close()
            finally:
                page.close()
        title = clean_line(str(document.get_metadata_value("Title") or ""))
    except pdfium.PdfiumError:
        raise ParseError("The PDF is damaged and cannot be read.") from None
    finally:
        document.close()
    blocks = _blocks(lines_by_page)
    if not any(b.text for b in blocks):
        raise ParseError(
            "The PDF holds no text (a scan?): qassist reads text PDFs; run it through OCR first."
        )
    if not title:
        title = next((b.text for b in blocks if b.heading), "")
    return Parsed(blocks=blocks, title=title, pages=pages)


def _lines(textpage: Any, pdfium_c: Any) -> list[tuple[str, float, bool]]:
    """The page's lines: (text, font size of its first character, bold); "" for a blank."""
    count = textpage.count_chars()
    if count <= 0:
        return []
    # One character per index: PDFium writes a line break as \r\n, two indexes.
    text = textpage.get_text_range(0, count)
    raw = textpage.raw
    name = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    out: list[tuple[str, float, bool]] = []
    start = 0
    for end in [*(i for i, c in enumerate(text) if c == "\n"), len(text)]:
        line = text[start:end]
        cleaned = clean_line(line)
        if not cleaned:
            out.append(("", 0.0, False))
        else:
            first = start + next(i for i, c in enumerate(line) if not c.isspace())
            size = bold = 0.0
            if first < count:
                size = float(pdfium_c.FPDFText_GetFontSize(raw, first))
                pdfium_c.FPDFText_GetFontInfo(raw, first, name, len(name), ctypes.byref(flags))
                weight = int(pdfium_c.FPDFText_GetFontWeight(raw, first))
                font = name.value.decode("latin-1").lower()
                bold = weight >= 600 or any(w in font for w in ("bold", "heavy", "black"))
            out.append((cleaned, size, bool(bold)))
        start = end + 1
    return out


def _running_lines(lines_by_page: list[list[tuple[str, float, bool]]]) -> set[str]:
    """Headers and footers: lines at the top or bottom of most pages, equal but for their
    numbers ("Expenses Policy v6.1 Page 2 of 3")."""
    if len(lines_by_page) < 2:
        return set()
    seen: Counter[str] = Counter()
    for page in lines_by_page:
        texts = [text for text, _, _ in page if text]
        seen.update({_shape(t) for t in texts[:2] + texts[-2:]})
    return {shape for shape, n in seen.items() if n >= max(2, len(lines_by_page) // 2)}


def _shape(text: str) -> str:
    return re.sub(r"\d+", "#", text)


def _blocks(lines_by_page: list[list[tuple[str, float, bool]]]) -> list[Block]:
    running = _running_lines(lines_by_page)
    sizes: Counter[float] = Counter()
    for page in lines_by_page:
        for text, size, _ in page:
            if text and size > 0:
                sizes[round(size, 1)] += len(text)
    body = sizes.most_common(1)[0][0] if sizes else 0.0
    # Heading sizes, largest first: the largest is level 1.
    heading_sizes = sorted({s for s in sizes if body and s >= body * _LARGER}, reverse=True)
    sections = SectionTracker()
    blocks: list[Block] = []
    for number, page in enumerate(lines_by_page, start=1):
        paragraph: list[str] = []
        for i, (text, size, bold) in enumerate([*page, ("", 0.0, False)]):
            if text and _shape(text) in running:
                continue
            if not text:
                if paragraph:
                    blocks.append(Block(join_lines(paragraph), sections.path, page=number))
                    paragraph = []
                continue
            level = _level(text, round(size, 1), bold, heading_sizes, page, i)
            if level is not None:
                if paragraph:
                    blocks.append(Block(join_lines(paragraph), sections.path, page=number))
                    paragraph = []
                blocks.append(Block(text, sections.enter(level, text), page=number, heading=True))
                continue
            if _page_number(text):
                continue
            paragraph.append(text)
    return blocks


def _level(
    text: str,
    size: float,
    bold: bool,
    heading_sizes: list[float],
    page: list[tuple[str, float, bool]],
    i: int,
) -> int | None:
    if len(text) > 90 or text.endswith((".", ",", ";", "。", "，", "；")):
        return None
    if size in heading_sizes:
        return heading_sizes.index(size) + 1
    alone = (i == 0 or not page[i - 1][0]) and (i + 1 >= len(page) or not page[i + 1][0])
    numbered = heading_level(text, followed_by_blank=True, previous_blank=True)
    if bold and len(text.split()) <= 10:
        # "3.1 Business meals" nests under "3. Limits"; a bold line without a number (a
        # table's header, a label) under both.
        return len(heading_sizes) + (numbered if numbered is not None else 3)
    if alone:
        return numbered
    return None


def _page_number(text: str) -> bool:
    """A running page number ("3", "Page 3 of 7", "- 3 -", "第 3 页")."""
    words = text.lower().replace("-", " ").replace("第", " ").replace("页", " ").split()
    if not words:
        return False
    if len(words) == 1 and words[0].isdigit():
        return True
    return words[0] == "page" and 2 <= len(words) <= 4 and words[1].isdigit()
