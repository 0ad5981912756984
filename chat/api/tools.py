"""Tool calls in Qwen2.5's format, both ways: the tools and earlier calls and results written
into the conversation as its chat template writes them, and the model's reply read back into
OpenAI's `tool_calls`.

Qwen2.5 lists the tools as JSON inside `<tools></tools>` in a system message, writes a call as
`<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>` and a function's result as a user
message holding `<tool_response>\\n…\\n</tool_response>`. qassist writes exactly that text, as
message contents: whoever wrote a tool's description or a result, it is never read as the
template's own control tokens (a model whose vocabulary has `<tool_call>` as a token of its own
still gets it, as an ordinary token). Models without tool training read the same format.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.constraints import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from qassist.json_input import JsonInputError, parse_json

OPEN = TOOL_CALL_OPEN.strip()  # "<tool_call>"
CLOSE = TOOL_CALL_CLOSE.strip()  # "</tool_call>"

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FORMAT = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def tools_text(tools: Sequence[dict[str, Any]]) -> str:
    """The system message that lists the tools (each as the request gave it)."""
    listed = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return TOOLS_PREAMBLE + listed + TOOLS_FORMAT


def call_text(name: str, arguments: Any) -> str:
    return (
        f"{TOOL_CALL_OPEN}"
        f"{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}"
        f"{TOOL_CALL_CLOSE}"
    )


class ArgumentsError(ValueError):
    """A call's arguments that cannot be read back into the conversation: JSON nested deeper
    than any request may be (qassist.json_input.MAX_DEPTH), or holding a lone surrogate.
    `index` is the call's place in the message."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


def assistant_text(content: str, calls: Sequence[tuple[str, str]]) -> str:
    """An assistant message with its calls (name, arguments as JSON text), as the model writes
    them. Arguments that are not JSON are kept as the string they are; JSON that nothing
    downstream could handle (100,000 levels deep once raised a RecursionError here, a 500) is
    ArgumentsError."""
    pieces = [content] if content else []
    for i, (name, arguments) in enumerate(calls):
        value = _arguments_value(i, arguments)
        pieces.append(call_text(name, value))
    return "\n".join(pieces)


def _arguments_value(index: int, arguments: str) -> Any:
    try:
        return parse_json(arguments)
    except JsonInputError as exc:
        if exc.kind == "invalid":
            return arguments
        raise ArgumentsError(index, exc.message) from None


def results_text(results: Sequence[str]) -> str:
    """Consecutive tool messages, as the one user message Qwen2.5's template makes of them."""
    return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)


# --- reading the reply ---------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedCall:
    id: str
    name: str
    arguments: str  # JSON text of an object


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def parse_call(raw: str, names: frozenset[str]) -> ParsedCall | None:
    """A call's JSON (between the tags), or None when it is not a call to one of `names` with
    an object of arguments."""
    try:
        # The model's own text, within max_tokens: still deep enough to exhaust Python's
        # recursion when a call nests thousands of brackets.
        data = parse_json(raw)
    except JsonInputError:
        return None
    if not isinstance(data, dict) or data.get("name") not in names:
        return None
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments)
        except JsonInputError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(new_call_id(), data["name"], json.dumps(arguments, ensure_ascii=False))


@dataclass
class ToolCallReader:
    """Splits a reply, as it streams, into its text and its calls. Text that may be the start
    of a call is held back until it is known; a call is given once it is complete (its closing
    tag), or at the end for a call the reply was cut in. Text between calls that is only
    whitespace is not content. What looks like a call but is not one (another name, arguments
    that are not an object) stays text."""

    names: frozenset[str]
    parallel: bool = True
    calls: list[ParsedCall] = field(default_factory=list)
    _buf: str = ""
    _in_call: bool = False
    _space: str = ""  # whitespace held until text follows it
    _content: bool = False  # some content was given

    def push(self, text: str) -> tuple[str, list[ParsedCall]]:
        """Add streamed text; return the content and the calls now known."""
        self._buf += text
        out: list[str] = []
        found: list[ParsedCall] = []
        while True:
            if not self._in_call:
                start = self._buf.find(OPEN)
                if start < 0:
                    keep = _partial_suffix(self._buf, OPEN)
                    out.append(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    break
                out.append(self._buf[:start])
                self._buf = self._buf[start + len(OPEN) :]
                self._in_call = True
            end = self._buf.find(CLOSE)
            if end < 0:
                break
            raw, self._buf = self._buf[:end], self._buf[end + len(CLOSE) :]
            self._in_call = False
            self._take(raw, out, found)
        return self._text("".join(out)), found

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """The reply ended: what is still held, as content or as a last call."""
        out: list[str] = []
        found: list[ParsedCall] = []
        if self._in_call:
            self._take(self._buf, out, found)
        else:
            out.append(self._buf)
        self._buf, self._in_call = "", False
        return self._text("".join(out)), found

    def _take(self, raw: str, out: list[str], found: list[ParsedCall]) -> None:
        call = parse_call(raw, self.names)
        if call is None:
            out.append(OPEN + raw + CLOSE)
        elif self.parallel or not self.calls:
            self.calls.append(call)
            found.append(call)

    def _text(self, text: str) -> str:
        """Content as it may be shown: whitespace-only stretches wait for text after them."""
        text = self._space + text
        stripped = text.rstrip()
        self._space = text[len(stripped) :]
        if not self._content:
            stripped = stripped.lstrip()
        if stripped:
            self._content = True
        return stripped


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that begins `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def read_reply(
    text: str, names: frozenset[str], *, parallel: bool
) -> tuple[str | None, list[ParsedCall]]:
    """A whole reply: its content (None when it is only calls) and its calls."""
    reader = ToolCallReader(names, parallel)
    content, _ = reader.push(text)
    rest, _ = reader.finish()
    return (content + rest) or None, reader.calls
