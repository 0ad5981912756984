"""Words for full-text search, the same for documents and questions.

Latin-script text is lower-cased and split into words (numbers kept whole, "180", "10.8.0.0");
runs of Chinese characters are segmented with jieba (its search mode also yields the shorter
words inside long ones: 年假天数 → 年假, 天数, 年假天数), so a question's 年假 matches a
document's 年假天数. The index stores these words separated by spaces, so SQLite's FTS5 and
PostgreSQL's `simple` configuration need no Chinese support of their own.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator

from knowledge.parsers.base import is_cjk

_TOKEN = re.compile(r"\d+(?:[.,:/-]\d+)*|[^\W\d_]+(?:['’][^\W\d_]+)?|\d+", re.UNICODE)
_lock = threading.Lock()
_ready = False

# Words too common to tell passages apart; dropped from questions only (documents keep them,
# so a phrase search over a document's text still finds them).
STOPWORDS = frozenset(
    """
    a an the and or but if of to in on at by for with from as is are was were be been being do
    does did doing have has had having i me my we our you your he she it its they them their
    this that these those what which who whom whose when where why how can could should would
    may might must shall will there here about into than then so not no any all some each
    please tell know get much many also just
    的 了 是 在 和 与 或 吗 呢 吧 啊 么 什么 怎么 怎样 如何 哪 哪些
    哪个 多少 几 我 我们 你 你们 他 她 它 请问 请 可以 能 会 要 需要
    有 没有 是否 一下 告诉 公司
    按 从 向 对 把 被 给 为 于 以 由 及 并 将 跟 让
    """.split()  # noqa: SIM905 - a word list reads best as words
)


def _jieba() -> object:
    global _ready
    import jieba

    if not _ready:
        with _lock:
            if not _ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _ready = True
    return jieba


def _cjk_runs(text: str) -> Iterator[tuple[bool, str]]:
    """`text` in runs of CJK and other characters, in order."""
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or is_cjk(text[i]) != is_cjk(text[start]):
            yield is_cjk(text[start]), text[start:i]
            start = i


def words(text: str) -> list[str]:
    """Every searchable word of `text`, in order, repeats kept."""
    out: list[str] = []
    for cjk, run in _cjk_runs(text):
        if not cjk:
            out.extend(match.group(0).lower() for match in _TOKEN.finditer(run))
            continue
        jieba = _jieba()
        for word in jieba.cut_for_search(run):  # type: ignore[attr-defined]
            word = word.strip()
            if word and any(is_cjk(c) and c.isalnum() for c in word):
                out.append(word)
    return out


def search_text(text: str) -> str:
    """What the index stores for a passage."""
    return " ".join(words(text))


def query_words(text: str) -> list[str]:
    """A question's distinct words worth searching for, in order."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
    return list(seen)


def mostly_cjk(text: str) -> bool:
    """A text a fifth or more of whose letters are Chinese (or other CJK) characters."""
    letters = [c for c in text if c.isalnum()]
    return bool(letters) and sum(is_cjk(c) for c in letters) * 5 >= len(letters)
