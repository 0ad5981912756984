"""JSON from clients (REST bodies, websocket frames, the page's fetch calls), refused with a
reason a client can act on instead of failing later with a 500.

Python's `json` accepts two things nothing downstream can use:
- a lone surrogate escape (`"\\ud800"`): valid JSON grammar, but not Unicode text; the database
  drivers, the tokenizer and `str.encode` refuse it wherever it lands;
- any nesting depth: a body of 100,000 `[` raises `RecursionError` inside the parser, and a
  structure just below the interpreter's limit can raise it later (validation, a JSON column).
Both are refused here, and the parser's own errors become `JsonInputError` too.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # OpenAI's request shapes nest 5 deep; 64 leaves room for any real metadata

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonInputError(ValueError):
    """Why a client's JSON was refused. `kind`: "invalid" (not JSON, or not UTF-8), "depth",
    or "surrogate"; `where`: the path of the bad string (`messages[0].content`), if known."""

    def __init__(self, kind: str, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.where = where


def parse_json(raw: str | bytes) -> Any:
    """The value of `raw` (UTF-8 bytes or text), or JsonInputError."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonInputError("invalid", "The body is not UTF-8 text.") from None
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JsonInputError("depth", _too_deep()) from None
    except ValueError:
        raise JsonInputError("invalid", "The body is not valid JSON.") from None
    check_json_value(value)
    return value


def check_json_value(value: Any) -> None:
    """Walk a parsed value without recursion: no container deeper than MAX_DEPTH, no string
    (key or value) holding a lone surrogate."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    if isinstance(value, str):
        _check_text(value, ())
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            entries: Any = item.items()
        elif isinstance(item, list):
            entries = enumerate(item)
        else:
            continue
        if depth > MAX_DEPTH:
            raise JsonInputError("depth", _too_deep(), _path(path))
        for key, child in entries:
            if isinstance(key, str):
                _check_text(key, path)
            if isinstance(child, str):
                _check_text(child, (*path, key))
            elif isinstance(child, dict | list):
                stack.append((child, depth + 1, (*path, key)))


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    match = _SURROGATE.search(text)
    if match is not None:
        raise JsonInputError(
            "surrogate",
            f"The text holds a lone surrogate (\\u{ord(match.group()):04x}), which is not "
            "Unicode: encode the text as UTF-8 (or escape whole surrogate pairs).",
            _path(path),
        )


def _too_deep() -> str:
    return f"The JSON is nested more than {MAX_DEPTH} levels deep."


def _path(path: tuple[str | int, ...]) -> str | None:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return text or None
