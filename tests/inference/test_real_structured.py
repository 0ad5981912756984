"""The real embedded model held to grammars by the runner: constrained and free sequences in one
batch, greedy and sampled, JSON that parses and validates, tool calls in Qwen2.5's format,
logprobs from the model's own distribution."""

import json
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
from tests.inference.test_real_model import model_path

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
def engine():
    from inference.runner import LlamaRunner

    runner = LlamaRunner(
        model_path(),
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


def run(engine: Engine, requests: dict[str, tuple[str, SamplingParams]]) -> dict[str, str]:
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
    # A constrained reply ends when its JSON does; a free one may run to max_tokens.
    constrained = [rid for rid, (_, p) in requests.items() if p.constraint is not None]
    assert {rid: done[rid].finish_reason for rid in constrained} == dict.fromkeys(
        constrained, "stop"
    )
    assert set(done) == set(requests)
    return texts


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
    texts = run(
        engine,
        {
            f"obj{i}": (
                "Describe a cat as JSON.",
                SamplingParams(
                    max_tokens=200, temperature=0.7, seed=i, constraint=constraint(None)
                ),
            )
            for i in range(3)
        },
    )
    for text in texts.values():
        assert isinstance(json.loads(text), dict)
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
