"""The real embedded model held to grammars by the runner: constrained and free sequences in one
batch, greedy and sampled, JSON that parses and validates, tool calls in Qwen2.5's format,
logprobs from the model's own distribution."""

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from inference.constraints import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    Tool,
    check_schema,
    tool_call_schema,
)
from inference.engine import Engine
from inference.types import ChatMessage, Constraint, Delta, Done, SamplingParams

pytestmark = pytest.mark.model

ORDER = {
    "type": "object",
    "properties": {
        "customer": {"type": "string", "maxLength": 30},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"},
                    "quantity": {"type": "integer"},
                    "size": {"enum": ["S", "M", "L"]},
                },
                "required": ["sku", "quantity", "size"],
                "additionalProperties": False,
            },
        },
        "express": {"type": "boolean"},
        "total": {"type": "number"},
        "note": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]},
    },
    "required": ["customer", "items", "express", "total", "note"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(embedded_model):
    from inference.runner import LlamaRunner

    runner = LlamaRunner(
        embedded_model,
        n_seq_max=6,
        n_ctx=4096,
        max_batch_tokens=256,
        n_threads=2,
        max_seq_tokens=1024,
    )
    yield Engine(runner, max_batch_tokens=256, max_queue=32)
    runner.close()


def constraint(schema: dict[str, Any] | None, **kwargs: Any) -> Constraint:
    from inference.runner import constraint_grammar

    checked = check_schema(schema) if schema is not None else None
    grammar = constraint_grammar(checked, **kwargs)
    return Constraint(grammar, json.dumps(checked) if checked else "", **kwargs)


def run_all(
    engine: Engine, requests: dict[str, tuple[str, SamplingParams]]
) -> tuple[dict[str, str], dict[str, str]]:
    """Run `requests` to the end: their texts and finish reasons."""
    for rid, (text, params) in requests.items():
        assert engine.add_request(rid, [ChatMessage("user", text)], params) == []
    texts: dict[str, str] = dict.fromkeys(requests, "")
    done: dict[str, Done] = {}
    for _ in range(5_000):
        if not engine.has_work:
            break
        for event in engine.step():
            if isinstance(event, Delta):
                texts[event.request_id] += event.text
            elif isinstance(event, Done):
                done[event.request_id] = event
    assert set(done) == set(requests)
    return texts, {rid: d.finish_reason for rid, d in done.items()}


def run(engine: Engine, requests: dict[str, tuple[str, SamplingParams]]) -> dict[str, str]:
    """Their texts, for requests whose grammars bound their length (strings with a maxLength,
    arrays with a maxItems) well inside max_tokens: each constrained reply ends with its JSON."""
    texts, finish = run_all(engine, requests)
    constrained = [rid for rid, (_, p) in requests.items() if p.constraint is not None]
    assert {rid: finish[rid] for rid in constrained} == dict.fromkeys(constrained, "stop")
    return texts


def json_prefix(text: str) -> bool:
    """Whether `text` is JSON or the beginning of some JSON (what a grammar-held reply cut by
    max_tokens is): a small recursive-descent reader for which running out of input is fine
    and anything else out of place is not."""
    pos = 0

    class Ran(Exception):
        pass

    def peek() -> str:
        if pos >= len(text):
            raise Ran
        return text[pos]

    def space() -> None:
        nonlocal pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1

    def expect(char: str) -> None:
        nonlocal pos
        if peek() != char:
            raise ValueError(f"{char!r} expected at {pos}")
        pos += 1

    def string() -> None:
        nonlocal pos
        expect('"')
        while (char := peek()) != '"':
            pos += 2 if char == "\\" else 1
        pos += 1

    def items(close: str, item: Callable[[], None]) -> None:
        nonlocal pos
        pos += 1
        space()
        if peek() == close:
            pos += 1
            return
        while True:
            item()
            space()
            if peek() == close:
                pos += 1
                return
            expect(",")

    def member() -> None:
        space()
        string()
        space()
        expect(":")
        value()

    def value() -> None:
        nonlocal pos
        space()
        char = peek()
        if char == "{":
            items("}", member)
        elif char == "[":
            items("]", value)
        elif char == '"':
            string()
        elif char in "-0123456789":
            while peek() in "-+.eE0123456789":
                pos += 1
        else:
            word = next((w for w in ("true", "false", "null") if w[0] == char), None)
            if word is None or not word.startswith(text[pos : pos + len(word)]):
                raise ValueError(f"no value at {pos}")
            pos += len(word)
            peek()  # a literal cut short ran out of input

    try:
        value()
        space()
        return pos == len(text)
    except Ran:
        return True
    except ValueError:
        return False


def test_the_json_prefix_check_can_fail() -> None:
    assert json_prefix('{"a": [1, true, "x\\"y"]}')
    assert json_prefix('{"a": [1, tr')
    assert json_prefix('{"name": "Fro')
    assert not json_prefix('{"a" 1')
    assert not json_prefix('{"a": 1} and more')
    assert not json_prefix("Sure! Here is")


def test_constrained_and_free_sequences_in_one_batch_each_keep_their_own_rules(engine):
    order = constraint(ORDER)
    asks = [
        "Ana wants two medium shirts ABC-123, express.",
        "Bo orders one large jacket XYZ-900.",
        "Write me a poem about JSON.",
    ]
    requests = {
        f"greedy{i}": (q, SamplingParams(max_tokens=400, temperature=0, constraint=order))
        for i, q in enumerate(asks)
    }
    requests |= {
        f"sampled{i}": (
            q,
            SamplingParams(max_tokens=400, temperature=1.0, seed=i, constraint=order),
        )
        for i, q in enumerate(asks)
    }
    requests["free"] = ("Say hello.", SamplingParams(max_tokens=24, temperature=0))
    texts = run(engine, requests)
    for rid, text in texts.items():
        if rid == "free":
            continue
        value = json.loads(text)
        jsonschema.validate(value, ORDER)
    assert texts["free"].strip()
    assert not texts["free"].lstrip().startswith('{"customer"')


def test_a_json_object_constraint_gives_an_object_and_releases_its_samplers(engine):
    requests = {
        f"obj{i}": (
            "Describe a cat as JSON.",
            SamplingParams(max_tokens=200, temperature=0.7, seed=i, constraint=constraint(None)),
        )
        for i in range(3)
    }
    # Any JSON object bounds nothing: the 135M model sampling at 0.7 sometimes writes one
    # string for ever ("a-z-a-z-…"), and where depends on the CPU's arithmetic. Ended on its
    # own, a reply is an object; cut by max_tokens, it is an object's beginning.
    texts, finish = run_all(engine, requests)
    for rid, text in texts.items():
        assert text.lstrip().startswith("{"), text
        if finish[rid] == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert finish[rid] == "length"
            assert json_prefix(text), text
    assert engine.runner._constrained == {}  # freed when each request ended
    assert engine.runner.last_logprobs == {}


def test_a_tool_call_constraint_gives_calls_in_qwens_format_with_valid_arguments(engine):
    weather = check_schema(
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        }
    )
    schema = tool_call_schema([Tool("get_weather", weather)])
    calls = constraint(schema, prefix=TOOL_CALL_OPEN, suffix=TOOL_CALL_CLOSE, repeat=True)
    (text,) = run(
        engine,
        {
            "t": (
                "Weather in Paris?",
                SamplingParams(max_tokens=500, temperature=0, constraint=calls),
            )
        },
    ).values()
    blocks = text.split("\n" + TOOL_CALL_OPEN)
    assert 1 <= len(blocks) <= 8
    for block in blocks:
        call = json.loads(block.removeprefix(TOOL_CALL_OPEN).removesuffix(TOOL_CALL_CLOSE))
        assert call["name"] == "get_weather"
        jsonschema.validate(call["arguments"], weather)


def test_logprobs_are_the_models_own_and_greedy_takes_the_likeliest(engine):
    rid = "lp"
    engine.add_request(
        rid,
        [ChatMessage("user", "What is the capital of France?")],
        SamplingParams(max_tokens=6, temperature=0, logprobs=4),
    )
    entries: list[dict[str, Any]] = []
    text = ""
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Delta):
                text += event.text
                entries += event.logprobs or []
    assert entries
    assert b"".join(bytes(e["bytes"]) for e in entries).decode() == text
    for entry in entries:
        top = entry["top_logprobs"]
        assert len(top) == 4
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["bytes"] == entry["bytes"]
        assert top[0]["logprob"] == entry["logprob"]
        assert sum(2.718281828 ** t["logprob"] for t in top) <= 1.0 + 1e-6


def test_a_grammar_llama_cpp_cannot_parse_is_refused_before_it_runs(engine):
    with pytest.raises(ValueError, match="could not parse"):
        engine.runner.check_constraint(Constraint("root ::= undefined-rule"))


def test_a_json_string_admits_no_raw_control_character(engine):
    # llama-cpp-python's port of the converter lets a raw newline into a string, which no JSON
    # parser accepts (a sampled "note" once began with "\n\n"); only its escape is allowed.
    runner = engine.runner
    grammar = runner._grammar_sampler(constraint_grammar_for({"type": "string"}).encode())
    try:
        opening = runner.tokenizer.tokenize('"', special=False)
        assert len(opening) == 1
        llama_cpp_accept(grammar, opening[0])
        for raw in ("\n", "\t", "\n\n"):
            tokens = runner.tokenizer.tokenize(raw, special=False)
            assert len(tokens) == 1, raw
            assert not runner._allows(grammar, tokens[0]), repr(raw)
        escaped = runner.tokenizer.tokenize("\\n", special=False)
        assert runner._allows(grammar, escaped[0])
        assert runner._allows(grammar, runner.tokenizer.tokenize("a", special=False)[0])
    finally:
        llama_cpp_free(grammar)


def constraint_grammar_for(schema: dict[str, Any]) -> str:
    from inference.runner import constraint_grammar

    return constraint_grammar(check_schema(schema))


def llama_cpp_accept(sampler: Any, token: int) -> None:
    import llama_cpp

    llama_cpp.llama_sampler_accept(sampler, token)


def llama_cpp_free(sampler: Any) -> None:
    import llama_cpp

    llama_cpp.llama_sampler_free(sampler)


def test_a_recursive_schema_makes_a_grammar_llama_cpp_takes_and_the_reply_follows_it(engine):
    from tests.inference.test_constraints import NODE

    params = SamplingParams(max_tokens=200, temperature=0, constraint=constraint(NODE))
    texts, finish = run_all(engine, {"tree": ("A linked list of two names, as JSON.", params)})
    if finish["tree"] == "stop":
        jsonschema.validate(json.loads(texts["tree"]), NODE)
    else:
        assert json_prefix(texts["tree"])
