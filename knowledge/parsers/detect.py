"""What a file really is, from its bytes, checked against what its name says.

A file is accepted only as one of the formats qassist parses, and only when its content agrees
with its extension: a PNG named `.pdf`, or text named `.docx`, is refused with a message that
says what the file is, before any parser runs.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePath

from knowledge.parsers.base import ParseError

PDF, DOCX, HTML, MARKDOWN, TEXT = "pdf", "docx", "html", "markdown", "text"
FORMATS = (PDF, DOCX, HTML, MARKDOWN, TEXT)

EXTENSIONS = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".html": HTML,
    ".htm": HTML,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": TEXT,
    ".text": TEXT,
}
# What people upload by mistake, named after what it is.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
    (b"\x7fELF", "a program"),
    (b"MZ", "a Windows program"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office file (.doc/.xls/.ppt): save it as .docx"),
    (b"RIFF", "an audio or video file"),
    (b"ID3", "an MP3 file"),
)
SUPPORTED_TEXT = "PDF, Word (.docx), HTML, Markdown or plain text"


def what_it_is(data: bytes) -> str | None:
    """A human name for a binary format, from its first bytes; None when not recognised."""
    if data.startswith(b"%PDF-") or b"%PDF-" in data[:1024]:
        return "a PDF"
    if data.startswith(b"PK\x03\x04"):
        names = _zip_names(data)
        if names is None:
            return "a damaged ZIP archive"
        if "word/document.xml" in names:
            return "a Word document (.docx)"
        if "xl/workbook.xml" in names:
            return "an Excel workbook (.xlsx)"
        if "ppt/presentation.xml" in names:
            return "a PowerPoint presentation (.pptx)"
        return "a ZIP archive"
    for signature, name in _SIGNATURES:
        if data.startswith(signature):
            return name
    return None


def _zip_names(data: bytes) -> set[str] | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError):
        return None


def detect(data: bytes, filename: str) -> str:
    """The format to parse `data` as, or ParseError saying why it is refused."""
    if not data:
        raise ParseError("The file is empty.")
    suffix = PurePath(filename).suffix.lower()
    claimed = EXTENSIONS.get(suffix)
    actual = what_it_is(data)
    if claimed is None:
        if actual == "a PDF":
            return PDF
        if actual == "a Word document (.docx)":
            return DOCX
        if actual is not None:
            raise ParseError(f"The file is {actual}; qassist reads {SUPPORTED_TEXT}.")
        if not suffix or suffix in (".htm", ".html"):
            return HTML if _looks_like_html(data) else TEXT
        raise ParseError(f"“{suffix}” files are not supported; qassist reads {SUPPORTED_TEXT}.")
    if claimed == PDF:
        if actual != "a PDF":
            raise ParseError(f"The file is named {suffix} but is {actual or 'not a PDF'}.")
        return PDF
    if claimed == DOCX:
        if actual != "a Word document (.docx)":
            raise ParseError(
                f"The file is named {suffix} but is {actual or 'not a Word document'}."
            )
        return DOCX
    if actual is not None:
        raise ParseError(f"The file is named {suffix} but is {actual}, not text.")
    return claimed


def _looks_like_html(data: bytes) -> bool:
    head = data[:2048].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head
