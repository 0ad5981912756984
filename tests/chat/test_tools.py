"""Reading a reply into tool calls (Qwen2.5's format), as it streams and whole."""

import json

from chat.api import tools
from chat.api.tools import ToolCallReader, read_reply

NAMES = frozenset({"get_weather", "get_time"})
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": "{}"}\n</tool_call>'


def streamed(text, size, *, parallel=True):
    reader = ToolCallReader(NAMES, parallel)
    content, calls = "", []
    for i in range(0, len(text), size):
        piece, found = reader.push(text[i : i + size])
        content += piece
        calls += found
    piece, found = reader.finish()
    return content + piece, calls


def test_text_then_calls_split_into_content_and_calls_however_the_text_streams():
    text = f"Let me check.\n{CALL}\n{TIME}"
    for size in (1, 2, 3, 7, 11, len(text)):
        content, calls = streamed(text, size)
        assert content == "Let me check."
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_weather", {"city": "Oslo"}),
            ("get_time", {}),
        ]
        assert len({c.id for c in calls}) == 2


def test_a_reply_of_calls_only_has_no_content_and_text_after_a_call_is_kept():
    assert read_reply(CALL, NAMES, parallel=True)[0] is None
    content, calls = read_reply(f"{CALL}\nDone.", NAMES, parallel=True)
    assert content == "Done."
    assert len(calls) == 1


def test_what_is_not_a_call_to_a_listed_tool_stays_text():
    for raw in (
        '<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_time", "arguments": [1]}\n</tool_call>',
        "<tool_call>\nnot json\n</tool_call>",
        "a <tool_ca b",
    ):
        content, calls = read_reply(raw, NAMES, parallel=True)
        assert (content, calls) == (raw, [])


def test_without_parallel_calls_only_the_first_is_taken():
    content, calls = streamed(f"{CALL}\n{TIME}", 5, parallel=False)
    assert content == ""
    assert [c.name for c in calls] == ["get_weather"]


def test_a_call_cut_before_its_closing_tag_is_still_a_call_when_its_json_is_whole():
    content, calls = read_reply(CALL.removesuffix("\n</tool_call>"), NAMES, parallel=True)
    assert content is None
    assert [c.name for c in calls] == ["get_weather"]


def test_the_conversation_is_written_as_qwens_template_writes_it():
    assert tools.assistant_text("", [("get_weather", '{"city": "Oslo"}')]) == CALL
    assert tools.assistant_text("Sure.", [("f", "not json")]) == (
        'Sure.\n<tool_call>\n{"name": "f", "arguments": "not json"}\n</tool_call>'
    )
    assert tools.results_text(["a", "b"]) == (
        "<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response>"
    )
    listed = tools.tools_text([{"type": "function", "function": {"name": "f"}}])
    assert listed.startswith("# Tools\n\nYou may call one or more functions")
    assert '\n<tools>\n{"type": "function", "function": {"name": "f"}}\n</tools>\n' in listed
