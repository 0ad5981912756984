"""Blocks into chunks: the passages retrieval finds and the model reads.

A chunk never crosses a heading, so its citation names one section (and the pages it spans).
Within a section, paragraphs are packed up to `target` tokens of the chat model; a paragraph
longer than `maximum` is cut at sentence ends — in English after . ! ?, in Chinese after
。！？； — and a sentence longer than that at clause marks, then anywhere. Sizes are counted with
the model's own tokenizer, so a budget of passage tokens in the prompt is exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from knowledge.parsers.base import Block, Parsed

TARGET_TOKENS = 220
MAX_TOKENS = 320

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|(?<=[，、：])")


@dataclass(frozen=True)
class ChunkDraft:
    text: str
    headings: tuple[str, ...]
    page: int | None  # the first page the chunk is on
    page_end: int | None
    tokens: int


def _sections(blocks: list[Block]) -> Iterator[list[Block]]:
    """Runs of content blocks under the same headings."""
    run: list[Block] = []
    for block in blocks:
        if block.heading:
            if run:
                yield run
            run = []
            continue
        if run and block.headings != run[-1].headings:
            yield run
            run = []
        run.append(block)
    if run:
        yield run


def _split(text: str, pattern: re.Pattern[str]) -> list[str]:
    return [piece.strip() for piece in pattern.split(text) if piece and piece.strip()]


def _pieces(block: Block, count: Callable[[str], int], maximum: int) -> Iterator[tuple[str, int]]:
    """The block's text in pieces of at most `maximum` tokens, cut where meaning allows."""
    tokens = count(block.text)
    if tokens <= maximum:
        yield block.text, tokens
        return
    for sentence in _split(block.text, _SENTENCE_END):
        n = count(sentence)
        if n <= maximum:
            yield sentence, n
            continue
        for clause in _split(sentence, _CLAUSE_END):
            m = count(clause)
            if m <= maximum:
                yield clause, m
                continue
            # No mark to cut at (a table cell, a URL list): cut by length.
            step = max(1, len(clause) * maximum // (m + 1))
            for start in range(0, len(clause), step):
                part = clause[start : start + step]
                yield part, count(part)


def chunk_blocks(
    parsed: Parsed,
    *,
    count: Callable[[str], int],
    target: int = TARGET_TOKENS,
    maximum: int = MAX_TOKENS,
) -> list[ChunkDraft]:
    chunks: list[ChunkDraft] = []
    for section in _sections(parsed.blocks):
        chunks += _pack(section, count, target, maximum)
    return chunks


def _pack(
    section: list[Block], count: Callable[[str], int], target: int, maximum: int
) -> list[ChunkDraft]:
    """One section's pieces packed into chunks of about `target` tokens."""
    headings = section[0].headings
    out: list[ChunkDraft] = []
    texts: list[str] = []
    size = 0
    first_page: int | None = None
    last_page: int | None = None
    for block in section:
        for text, tokens in _pieces(block, count, maximum):
            if texts and size + tokens > target:
                out.append(ChunkDraft("\n".join(texts), headings, first_page, last_page, size))
                texts, size, first_page, last_page = [], 0, None, None
            texts.append(text)
            size += tokens + 1  # the newline between pieces
            if first_page is None:
                first_page = block.page
            last_page = block.page if block.page is not None else last_page
    if texts:
        out.append(ChunkDraft("\n".join(texts), headings, first_page, last_page, size))
    return out
