"""What a file may expand into, checked by decompressing it as a stream and counting: a
compressed part that unpacks past its own declared size or past the cap is refused before any
library unpacks it whole (issue #32: a 4 MB PDF whose one Flate stream expands to 4 GiB took
the Celery worker to 5.5 GB; a DOCX whose ZIP directory said 1,000 bytes for 1 GiB, to
2.4 GB). The output is thrown away as it comes, a megabyte at a time: checking costs the time
of one decompression and no memory.

These checks give a clear reason early. The hard bound is the parser's child process and its
memory limit (knowledge/parsers/sandbox.py), whatever a format hides.
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Iterator

from knowledge.parsers.base import ParseError

OUT_CHUNK = 1 << 20  # bytes of decompressed output held at once
IN_CHUNK = 1 << 16
PDF_MAX_STREAM_BYTES = 128 * 1024 * 1024  # one Flate stream of a PDF, decompressed
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then file name and extra field lengths
_STREAM = re.compile(rb"(?<!end)stream(?:\r\n|\n|\r)")


def inflated_size(raw: memoryview, wbits: int, limit: int) -> int | None:
    """How many bytes `raw` (deflate data) expands to, or None once that is past `limit`."""
    inflater = zlib.decompressobj(wbits)
    total = 0
    for start in range(0, len(raw), IN_CHUNK):
        pending = bytes(raw[start : start + IN_CHUNK])
        # What follows the end of the data stays in `unconsumed_tail` when the output is
        # bounded: the end is the end, whatever is left over.
        while pending and not inflater.eof:
            total += len(inflater.decompress(pending, OUT_CHUNK))
            if total > limit:
                return None
            pending = inflater.unconsumed_tail
        if inflater.eof:
            break
    return total


def check_zip_members(archive: zipfile.ZipFile, data: bytes, *, cap: int, what: str) -> None:
    """Each member of `archive` (the bytes `data`) unpacks to no more than its directory
    says, and all of them to no more than `cap`; ParseError naming the member otherwise."""
    view = memoryview(data)
    total = 0
    for entry in archive.infolist():
        if entry.compress_type == zipfile.ZIP_STORED:
            size = entry.compress_size
        elif entry.compress_type == zipfile.ZIP_DEFLATED:
            declared = entry.file_size
            found = inflated_size(_member_data(view, entry), -15, min(declared, cap - total))
            if found is None:
                raise ParseError(
                    f"The {what}'s {entry.filename} unpacks to more than its archive says "
                    f"({declared:,} bytes) or than a document may hold "
                    f"({cap / 1e6:,.0f} MB); it was not opened."
                )
            size = found
        else:
            raise ParseError(
                f"The {what}'s {entry.filename} is compressed in a way Office does not use."
            )
        total += size
        if total > cap:
            raise ParseError(
                f"The {what} would unpack to more than {cap / 1e6:,.0f} MB; it was not opened."
            )


def _member_data(view: memoryview, entry: zipfile.ZipInfo) -> memoryview:
    start = entry.header_offset
    header = bytes(view[start : start + _LOCAL_HEADER.size])
    if len(header) < _LOCAL_HEADER.size:
        raise ParseError("The archive is damaged (a member lies past its end).")
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    if signature != b"PK\x03\x04":
        raise ParseError("The archive is damaged (a member's header is missing).")
    begin = start + _LOCAL_HEADER.size + name_length + extra_length
    return view[begin : begin + entry.compress_size]


def check_pdf_streams(data: bytes, *, cap: int = PDF_MAX_STREAM_BYTES) -> None:
    """No Flate stream of the PDF expands past `cap` (images aside: text extraction never
    decodes them). A stream that is not zlib data is left to the parser."""
    view = memoryview(data)
    for start, dictionary in _streams(data):
        if b"/FlateDecode" not in dictionary or b"/Image" in dictionary:
            continue
        try:
            found = inflated_size(view[start:], 15, cap)
        except zlib.error:
            continue  # damaged or not Flate after all: PDFium decides
        if found is None:
            raise ParseError(
                f"One of the PDF's streams expands to more than {cap / 1e6:,.0f} MB (a "
                "decompression bomb); it was not opened."
            )


def _streams(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Where each stream's data begins, with the dictionary before it (up to its object)."""
    for match in _STREAM.finditer(data):
        head = data[max(0, match.start() - 2048) : match.start()]
        begins = max(head.rfind(b" obj"), head.rfind(b"endstream"))
        yield match.end(), head[begins + 1 :] if begins >= 0 else head
