"""Plain text: UTF-8 (with or without a byte-order mark), UTF-16 with one, or GB18030.

Paragraphs are separated by blank lines. A line that looks like a heading (numbered, such as
"3.2 Hotels" or "第三章 住宿", or short and followed by a blank line, without final
punctuation) opens a section, so plain-text policies still cite "Hotels".
"""

from __future__ import annotations

import re

from knowledge.parsers.base import (
    Block,
    Parsed,
    ParseError,
    SectionTracker,
    clean_line,
    join_lines,
)

# Control characters other than tab, newline, carriage return and form feed: binary data.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
MAX_CONTROL_SHARE = 0.001

_NUMBERED = re.compile(
    r"^(?:(?P<num>\d+(?:\.\d+){0,3})\.?\s+\S"  # 3  /  3.2  /  3.2.1
    r"|第[一二三四五六七八九十百零〇\d]+[章节条部分篇]"  # 第三章
    r"|[一二三四五六七八九十]+、\S"  # 三、住宿
    r"|#{1,6}\s)"  # a Markdown heading in a .txt
)
_END_PUNCTUATION = tuple(".,;:!?。，；：！？、")


def decode_text(data: bytes) -> str:
    """The text of `data`, or ParseError when it is no text qassist can read."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise ParseError("The file says it is UTF-16 text but is not.") from None
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                text = data.decode("gb18030")
            except UnicodeDecodeError:
                raise ParseError(
                    "The file is not text in UTF-8 or GB18030: save it as UTF-8 text."
                ) from None
    controls = len(_CONTROL.findall(text))
    if controls > max(2, MAX_CONTROL_SHARE * len(text)):
        raise ParseError("The file is binary data, not text.")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def heading_level(line: str, *, followed_by_blank: bool, previous_blank: bool) -> int | None:
    """The level of a heading line (1 = top), or None for ordinary text."""
    if len(line) > 80:
        return None
    match = _NUMBERED.match(line)
    if match:
        if line.startswith("#"):
            return len(line) - len(line.lstrip("#"))
        num = match.group("num")
        if num is not None:
            # "3 days are allowed." is a sentence, not a heading.
            if line.endswith(_END_PUNCTUATION) or len(line.split()) > 10:
                return None
            return num.count(".") + 1
        return 1
    short = len(line.split()) <= 8 and len(line) <= 60
    if previous_blank and followed_by_blank and short and not line.endswith(_END_PUNCTUATION):
        return 2
    return None


def parse_text(data: bytes) -> Parsed:
    text = decode_text(data)
    lines = text.split("\n")
    sections = SectionTracker()
    blocks: list[Block] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(Block(join_lines(paragraph), sections.path))
            paragraph.clear()

    for i, raw in enumerate(lines):
        line = clean_line(raw)
        if not line:
            flush()
            continue
        previous_blank = i == 0 or not lines[i - 1].strip()
        followed_by_blank = i + 1 >= len(lines) or not lines[i + 1].strip()
        level = None
        if previous_blank:
            level = heading_level(
                line, followed_by_blank=followed_by_blank, previous_blank=previous_blank
            )
        if level is not None:
            flush()
            title = line.lstrip("#").strip()
            blocks.append(Block(title, sections.enter(level, title), heading=True))
            continue
        paragraph.append(line)
    flush()
    if not any(b.text for b in blocks):
        raise ParseError("The file holds no text.")
    # A text file's first line is its title when it is short enough to be one.
    first = next((clean_line(line) for line in lines if line.strip()), "")
    title = first if len(first) <= 80 else next((b.text for b in blocks if b.heading), "")
    return Parsed(blocks=blocks, title=title)
