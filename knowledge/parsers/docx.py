"""Word documents (.docx), read with python-docx after the archive was checked: paragraphs in
"Heading n" (or "Title") styles open sections, other paragraphs and table rows (with their
column names) become blocks, in document order.

A .docx is a ZIP archive, so it is inspected before anything is unpacked: too many entries, an
entry that expands past the size limit or by an absurd ratio (a zip bomb) is refused, and so is
one that unpacks to more than its directory says (checked by decompressing it as a stream,
knowledge/parsers/limits.py): python-docx would otherwise unpack it whole first.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from knowledge.parsers.base import (
    Block,
    Parsed,
    ParseError,
    SectionTracker,
    clean_line,
    table_row_text,
)
from knowledge.parsers.limits import check_zip_members

MAX_ENTRIES = 2_000
MAX_UNPACKED_BYTES = 200 * 1024 * 1024
MAX_RATIO = 200  # a Word document's XML compresses 5-20x; 200x is no document
_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)


def check_archive(data: bytes) -> None:
    """Refuse a .docx whose archive would unpack into more than a document ever holds."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ParseError("The Word document is damaged (not a readable ZIP archive).") from None
    with archive:
        entries = archive.infolist()
        if len(entries) > MAX_ENTRIES:
            raise ParseError(f"The Word document holds {len(entries):,} files; too many.")
        total = 0
        for entry in entries:
            total += entry.file_size
            ratio = entry.file_size / max(entry.compress_size, 1)
            if entry.file_size > 1_000_000 and ratio > MAX_RATIO:
                raise ParseError(
                    f"The Word document's {entry.filename} would expand {ratio:,.0f} times "
                    "(a zip bomb); it was not opened."
                )
        if total > MAX_UNPACKED_BYTES:
            raise ParseError(
                f"The Word document would unpack to {total / 1e6:,.0f} MB; the limit is "
                f"{MAX_UNPACKED_BYTES / 1e6:,.0f} MB."
            )
        check_zip_members(archive, data, cap=MAX_UNPACKED_BYTES, what="Word document")


def parse_docx(data: bytes) -> Parsed:
    check_archive(data)
    import docx  # python-docx: imported here, where it is needed
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ParseError(f"The Word document cannot be read ({type(exc).__name__}).") from None
    except Exception as exc:  # lxml and python-docx raise many kinds on damaged parts
        raise ParseError(f"The Word document is damaged ({type(exc).__name__}).") from None
    sections = SectionTracker()
    blocks: list[Block] = []
    for item in _body_items(document):
        if item.__class__.__name__ == "Table":
            _table(item, sections, blocks)
            continue
        text = clean_line(item.text)
        if not text:
            continue
        level = _heading_level(item)
        if level is not None:
            blocks.append(Block(text, sections.enter(level, text), heading=True))
        else:
            blocks.append(Block(text, sections.path))
    if not any(b.text for b in blocks):
        raise ParseError("The Word document holds no text.")
    title = clean_line(document.core_properties.title or "")
    if not title:
        title = next((b.text for b in blocks if b.heading), "")
    return Parsed(blocks=blocks, title=title)


def _body_items(document: Any) -> list[Any]:
    """Paragraphs and tables in the order they appear."""
    return list(document.iter_inner_content())


def _heading_level(paragraph: Any) -> int | None:
    style = paragraph.style.name if paragraph.style is not None else ""
    if style.lower() == "title":
        return 1
    match = _HEADING_STYLE.match(style.strip())
    return int(match.group(1)) if match else None


def _table(table: Any, sections: SectionTracker, blocks: list[Block]) -> None:
    header: list[str] = []
    for i, row in enumerate(table.rows):
        cells = [clean_line(cell.text) for cell in row.cells]
        # Merged cells repeat: keep each distinct cell once, in order.
        cells = [c for j, c in enumerate(cells) if j == 0 or c != cells[j - 1]]
        if i == 0:
            header = cells
            continue
        line = table_row_text(header, cells)
        if line:
            blocks.append(Block(line, sections.path))
    if len(table.rows) == 1 and header:
        blocks.append(Block(" | ".join(header), sections.path))
