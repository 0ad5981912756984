"""Structured output, tool calls, logprobs and embeddings over REST, through the ASGI
application with the fake runner behind an in-process engine (the fake honours a request's
grammar constraint with the simplest valid JSON)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import numpy as np
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chat.api import tools
from chat.api.embeddings import MAX_INPUT_CHARS
from chat.models import ChatSession
from knowledge.embeddings import set_embedder
from tenants.models import ApiKey, Tenant, UsageRecord
from tests.chat.conftest import FakeEngine
from tests.chat.test_api import MODEL, ask, error_of, headers, post, sse_events
from tests.fakes import FakeEmbedder, FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "severity": {"enum": ["low", "medium", "high"]},
        "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "estimate": {"type": "number"},
        "reporter": {"$ref": "#/$defs/person"},
    },
    "required": ["title", "severity", "steps", "estimate", "reporter"],
    "additionalProperties": False,
    "$defs": {
        "person": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        }
    },
}
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time"}}
OSLO_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'
)


@pytest.fixture
def key(api_key: tuple[ApiKey, str]) -> str:
    return api_key[1]


def schema_format(schema: dict[str, Any] = TICKET) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "ticket", "schema": schema}}


# --- structured output -------------------------------------------------------------------


async def test_a_json_schema_reply_validates_and_the_model_was_shown_the_schema(
    engine: FakeEngine, key: str
) -> None:
    response = await post(key, ask("file a ticket", response_format=schema_format()))
    assert response.status_code == 200, response.content
    message = response.json()["choices"][0]["message"]
    jsonschema.validate(json.loads(message["content"]), TICKET)
    constraint = engine.runner.constraints[-1]
    assert "json-severity" in constraint.grammar  # the converter's rules, not a placeholder
    prompt = list(engine.runner.prompts)[-1]
    assert '"severity":{"enum":["low","medium","high"]}' in prompt


async def test_a_streamed_json_schema_reply_joins_to_valid_json(
    engine: FakeEngine, key: str
) -> None:
    response = await post(key, ask("file a ticket", response_format=schema_format(), stream=True))
    events = await sse_events(response)
    text = "".join(e["choices"][0]["delta"]["content"] or "" for e in events[:-1])
    jsonschema.validate(json.loads(text), TICKET)
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


async def test_json_object_constrains_the_reply_to_an_object(engine: FakeEngine, key: str) -> None:
    response = await post(key, ask("json please", response_format={"type": "json_object"}))
    assert isinstance(json.loads(response.json()["choices"][0]["message"]["content"]), dict)
    constraint = engine.runner.constraints[-1]
    assert constraint.schema == ""  # any object
    assert "root ::= json" in constraint.grammar
    assert "json ::= object" in constraint.grammar


@pytest.mark.parametrize(
    ("schema", "named", "where"),
    [
        ({"type": "integer", "minimum": 0}, "minimum", "/"),
        ({"type": "string", "format": "email"}, "format", "/"),
        (
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
            "uniqueItems",
            "/properties/a",
        ),
        ({"type": "string", "pattern": "abc"}, "pattern", "/"),
        ({"not": {"type": "null"}}, "not", "/"),
        ({"$ref": "https://example.com/schema.json"}, "$ref", "/"),
        ({"type": "array", "maxItems": 100_000}, "maxItems", "/"),
    ],
)
async def test_a_schema_feature_the_grammar_cannot_enforce_is_refused_by_name(
    engine: FakeEngine, key: str, schema: dict[str, Any], named: str, where: str
) -> None:
    response = await post(key, ask("x", response_format=schema_format(schema)))
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "unsupported_schema"
    assert error["param"] == "response_format.json_schema.schema"
    assert named in error["message"]
    assert f"(at {where})" in error["message"]
    assert engine.runner.batches == []
    assert await sync_to_async(ChatSession.objects.count)() == 0


async def test_a_response_format_of_another_type_is_a_400_naming_it(key: str) -> None:
    response = await post(key, ask("x", response_format={"type": "xml"}))
    assert response.status_code == 400
    assert error_of(response)["param"].startswith("response_format")


async def test_a_cached_reply_never_answers_a_request_for_json(
    engine: FakeEngine, key: str, tenant: Tenant
) -> None:
    from chat.models import CachedReply

    await sync_to_async(CachedReply.objects.create)(
        tenant=tenant, question="What is the VPN address?", answer="vpn.acme.example"
    )
    body = ask("What is the VPN address?", response_format={"type": "json_object"})
    response = await post(key, body)
    assert json.loads(response.json()["choices"][0]["message"]["content"]) == {"reply": "echo"}


# --- tools ---------------------------------------------------------------------------------


async def test_required_tool_choice_gives_well_formed_calls_with_valid_arguments(
    engine: FakeEngine, key: str
) -> None:
    response = await post(key, ask("weather in Paris?", tools=[WEATHER], tool_choice="required"))
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_")
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(
        json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"]
    )
    prompt = list(engine.runner.prompts)[-1]
    assert tools.TOOLS_PREAMBLE in prompt
    assert '"name": "get_weather"' in prompt


async def test_required_with_parallel_calls_may_call_several_tools_and_a_named_one_only_it(
    engine: FakeEngine, key: str
) -> None:
    parallel = await post(key, ask("both", tools=[WEATHER, CLOCK], tool_choice="required"))
    names = [c["function"]["name"] for c in parallel.json()["choices"][0]["message"]["tool_calls"]]
    assert names == ["get_weather", "get_time"]
    assert engine.runner.constraints[-1].repeat
    single = await post(
        key, ask("both", tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False)
    )
    assert len(single.json()["choices"][0]["message"]["tool_calls"]) == 1
    named = await post(
        key,
        ask(
            "time",
            tools=[WEATHER, CLOCK],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        ),
    )
    (call,) = named.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_time", "arguments": "{}"}
    assert "get_weather" not in engine.runner.constraints[-1].grammar


async def test_with_auto_a_reply_that_calls_a_tool_is_read_into_tool_calls(
    use_engine: Any, key: str
) -> None:
    call = OSLO_CALL
    engine = use_engine(FakeRunner(reply_for=lambda q: f"Let me look.\n{call}"))
    response = await post(key, ask("weather in Oslo?", tools=[WEATHER]))
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == "Let me look."
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Oslo",
        "unit": "c",
    }
    assert choice["finish_reason"] == "tool_calls"
    assert engine.runner.constraints == []  # auto: the model chooses, nothing is forced


async def test_with_auto_a_call_to_an_unknown_tool_stays_text(use_engine: Any, key: str) -> None:
    text = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    use_engine(FakeRunner(reply_for=lambda q: text))
    response = await post(key, ask("x", tools=[WEATHER]))
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == text
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"


async def test_tool_calls_stream_as_fragments_a_client_can_join(use_engine: Any, key: str) -> None:
    call = OSLO_CALL
    use_engine(FakeRunner(reply_for=lambda q: f"Checking.\n{call}\n{call}"))
    response = await post(key, ask("x", tools=[WEATHER], stream=True))
    events = await sse_events(response)
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == "Checking."
    fragments = [f for d in deltas for f in d.get("tool_calls") or []]
    assert all(len(d.get("tool_calls") or []) <= 1 for d in deltas)  # one fragment a chunk
    joined: dict[int, dict[str, Any]] = {}
    for f in fragments:
        slot = joined.setdefault(f["index"], {"arguments": ""})
        for k in ("id", "type"):
            if k in f:
                slot[k] = f[k]
        slot["name"] = f["function"].get("name", slot.get("name"))
        slot["arguments"] += f["function"].get("arguments", "")
    assert sorted(joined) == [0, 1]
    assert all(json.loads(c["arguments"]) == {"city": "Oslo", "unit": "c"} for c in joined.values())
    assert {c["type"] for c in joined.values()} == {"function"}
    assert joined[0]["id"] != joined[1]["id"]
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_results_and_earlier_calls_reach_the_model_in_qwens_format(
    engine: FakeEngine, key: str
) -> None:
    body = {
        "model": MODEL,
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "4 °C, rain"},
        ],
    }
    response = await post(key, body)
    assert response.status_code == 200, response.content
    prompt = list(engine.runner.prompts)[-1]
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        in prompt
    )
    assert "<user><tool_response>\n4 °C, rain\n</tool_response>" in prompt


def earlier_call(arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}},
        ],
    }


DEEP_ARGUMENTS = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/batches"])
async def test_deeply_nested_call_arguments_are_a_400_naming_them(
    engine: FakeEngine, key: str, path: str
) -> None:
    """100,000 levels of JSON in an earlier call's arguments raised a RecursionError, a 500
    (issue #32, finding 5)."""
    messages = [
        {"role": "user", "content": "x"},
        earlier_call(DEEP_ARGUMENTS),
        {"role": "user", "content": "and now?"},
    ]
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if path == "/v1/batches":
        body = {"requests": [body]}
    response = await AsyncClient().post(
        path, data=json.dumps(body), content_type="application/json", headers=headers(key)
    )
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    where = "messages[1].tool_calls[1].function.arguments"
    assert error["param"] == (where if path.endswith("completions") else f"requests[0].{where}")
    assert "nested more than 64 levels" in error["message"]
    assert await ChatSession.objects.acount() == 0


async def test_call_arguments_that_are_not_json_are_kept_as_text(
    engine: FakeEngine, key: str
) -> None:
    messages = [
        {"role": "user", "content": "x"},
        earlier_call("not json {"),
        {"role": "user", "content": "and now?"},
    ]
    response = await post(key, {"model": MODEL, "messages": messages})
    assert response.status_code == 200
    assert '"arguments": "not json {"' in list(engine.runner.prompts)[-1]


def test_a_reply_nesting_thousands_of_brackets_in_a_call_stays_text() -> None:
    raw = '{"name": "f", "arguments": ' + "[" * 5_000 + "]" * 5_000 + "}"
    text = tools.OPEN + "\n" + raw + "\n" + tools.CLOSE
    assert tools.read_reply(text, frozenset({"f"}), parallel=True) == (text, [])


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
        ),
        ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
async def test_inconsistent_tool_and_logprob_parameters_are_a_400_naming_one(
    engine: FakeEngine, key: str, extra: dict[str, Any], param: str
) -> None:
    response = await post(key, ask("x", **extra))
    assert response.status_code == 400
    assert error_of(response)["param"] == param


async def test_a_required_tools_schema_the_grammar_cannot_enforce_is_refused_by_name(
    engine: FakeEngine, key: str
) -> None:
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "minProperties": 1}},
    }
    response = await post(key, ask("x", tools=[tool], tool_choice="required"))
    error = error_of(response)
    assert error["param"] == "tools[0].function.parameters"
    assert "minProperties" in error["message"]


async def test_the_issues_hostile_pattern_is_refused_before_anything_runs(
    engine: FakeEngine, key: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "pattern": "^(a{0,256}){0,256}$"}},
        "required": ["x"],
    }
    response = await post(key, ask("x", response_format=schema_format(schema)))
    assert response.status_code == 400
    error = error_of(response)
    assert (error["code"], error["param"]) == (
        "unsupported_schema",
        "response_format.json_schema.schema",
    )
    assert "may be empty" in error["message"]
    assert engine.runner.constraints == []  # it never reached the engine


async def test_a_schema_that_refers_to_itself_is_enforced(engine: FakeEngine, key: str) -> None:
    from tests.inference.test_constraints import NODE

    response = await post(key, ask("a list", response_format=schema_format(NODE)))
    assert response.status_code == 200, response.content
    jsonschema.validate(json.loads(response.json()["choices"][0]["message"]["content"]), NODE)


async def test_a_reply_whose_grammar_overruns_its_time_is_a_400_naming_why(
    use_engine: Any, key: str
) -> None:
    """The engine ends a constrained request whose grammar takes longer than
    QASSIST_GRAMMAR_STEP_SECONDS in one step (tests/inference/test_hostile_grammar.py)."""
    use_engine(FakeRunner(grammar_step_seconds=0.5, grammar_seconds=lambda request: 2.0))
    response = await post(key, ask("x", response_format={"type": "json_object"}))
    assert response.status_code == 400
    assert error_of(response)["code"] == "grammar_too_slow"
    assert "simplify it" in error_of(response)["message"]


# --- logprobs ------------------------------------------------------------------------------


async def test_logprobs_come_per_token_with_the_alternatives_asked_for(
    use_engine: Any, key: str
) -> None:
    use_engine(FakeRunner(reply_for=lambda q: "yes"))
    response = await post(key, ask("x", logprobs=True, top_logprobs=2))
    logprobs = response.json()["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in logprobs] == ["y", "e", "s"]
    assert all(len(e["top_logprobs"]) == 2 and e["logprob"] <= 0 for e in logprobs)
    stream = await sse_events(await post(key, ask("x", logprobs=True, stream=True)))
    streamed = [
        e
        for chunk in stream[:-1]
        for e in ((chunk["choices"] or [{}])[0].get("logprobs") or {}).get("content") or []
    ]
    assert "".join(e["token"] for e in streamed) == "yes"
    assert all(e["top_logprobs"] == [] for e in streamed)


async def test_without_logprobs_a_choice_says_null(engine: FakeEngine, key: str) -> None:
    assert (await post(key, ask("x"))).json()["choices"][0]["logprobs"] is None


# --- embeddings ------------------------------------------------------------------------------


@pytest.fixture
def embedder(settings: Any) -> Iterator[FakeEmbedder]:
    settings.QASSIST_EMBEDDING_MODEL = EMBEDDING_MODEL
    fake = FakeEmbedder()
    set_embedder(fake)
    yield fake
    set_embedder(None)


async def embed(raw_key: str, body: Any) -> Any:
    return await AsyncClient().post(
        "/v1/embeddings",
        data=json.dumps(body),
        content_type="application/json",
        headers=headers(raw_key),
    )


EMBEDDING_MODEL = "use-multilingual-v3"


async def test_embeddings_come_as_floats_or_base64_of_the_same_vectors(
    embedder: FakeEmbedder, key: str
) -> None:
    texts = ["the VPN address", "请假流程", "the VPN address"]
    floats = (await embed(key, {"model": EMBEDDING_MODEL, "input": texts})).json()
    assert [d["index"] for d in floats["data"]] == [0, 1, 2]
    vectors = np.array([d["embedding"] for d in floats["data"]], dtype=np.float32)
    assert vectors.shape == (3, 512)
    assert np.allclose(vectors, embedder.embed_passages(texts))
    assert np.allclose(vectors[0], vectors[2])
    assert not np.allclose(vectors[0], vectors[1])
    encoded = await embed(
        key, {"model": EMBEDDING_MODEL, "input": texts, "encoding_format": "base64"}
    )
    decoded = [
        np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in encoded.json()["data"]
    ]
    assert np.array_equal(np.vstack(decoded), vectors)
    assert floats["usage"]["prompt_tokens"] == floats["usage"]["total_tokens"] > 0


async def test_embeddings_are_usage_and_admitted_against_the_tenants_limits(
    embedder: FakeEmbedder, key: str, tenant: Tenant
) -> None:
    response = await embed(key, {"model": EMBEDDING_MODEL, "input": "hello there"})
    tokens = response.json()["usage"]["prompt_tokens"]
    record = await sync_to_async(UsageRecord.objects.get)(reason="embeddings")
    assert (record.prompt_tokens, record.completion_tokens, record.status) == (tokens, 0, "ok")
    tenant.requests_per_minute = 1
    await sync_to_async(tenant.save)()
    refused = await embed(key, {"model": EMBEDDING_MODEL, "input": "again"})
    assert refused.status_code == 429
    assert refused["Retry-After"]
    assert error_of(refused)["code"] == "rate_limit_exceeded"
    assert embedder.calls == [("passage", 1)]  # the refused texts were never embedded
    assert (
        await sync_to_async(UsageRecord.objects.filter(reason="requests_per_minute").count)() == 1
    )


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        (
            {"model": EMBEDDING_MODEL, "input": "x", "dimensions": 256},
            400,
            "dimensions",
            "unsupported_parameter",
        ),
        ({"model": EMBEDDING_MODEL, "input": [[1, 2, 3]]}, 400, "input", "unsupported_parameter"),
        ({"model": EMBEDDING_MODEL, "input": ["ok", " "]}, 400, "input[1]", None),
        ({"model": EMBEDDING_MODEL, "input": []}, 400, "input", "invalid_value"),
        (
            {"model": EMBEDDING_MODEL, "input": "x", "encoding_format": "int8"},
            400,
            "encoding_format",
            "invalid_value",
        ),
        ({"model": "text-embedding-3-small", "input": "x"}, 404, "model", "model_not_found"),
    ],
)
async def test_an_embeddings_request_it_cannot_serve_is_refused_naming_why(
    embedder: FakeEmbedder,
    key: str,
    body: dict[str, Any],
    status: int,
    param: str,
    code: str | None,
) -> None:
    response = await embed(key, body)
    assert response.status_code == status
    error = error_of(response)
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert embedder.calls == []


@pytest.mark.parametrize(
    ("texts", "status", "param", "code"),
    [
        # One text over the characters any text the model reads may have: refused on sight.
        (["ok", "x" * (MAX_INPUT_CHARS + 1)], 400, "input[1]", "context_length_exceeded"),
        # Over the model's own maximum of tokens (the fake reads 2,048 words).
        ("w " * 2_049, 400, "input", "context_length_exceeded"),
        # Under the limits one by one, over them together.
        (["w " * 2_000] * 151, 413, "input", "request_too_large"),
        (["a" * MAX_INPUT_CHARS] * 123, 413, "input", "request_too_large"),
    ],
    ids=["chars-per-text", "tokens-per-text", "tokens-per-request", "chars-per-request"],
)
async def test_texts_beyond_the_bounds_are_refused_before_any_work(
    embedder: FakeEmbedder, key: str, texts: Any, status: int, param: str, code: str
) -> None:
    """The attack (issue #32): one 3.9 MB string took the web process to 21 GB. Every bound is
    checked before admission and before the model, cheapest first."""
    response = await embed(key, {"model": EMBEDDING_MODEL, "input": texts})
    assert response.status_code == status, response.content[:300]
    error = error_of(response)
    assert (error["param"], error["code"]) == (param, code)
    assert embedder.calls == []  # nothing embedded
    assert not await UsageRecord.objects.aexists()  # nor admitted


async def test_the_largest_text_the_model_reads_is_embedded(
    embedder: FakeEmbedder, key: str
) -> None:
    text = "w " * embedder.max_tokens
    response = await embed(key, {"model": EMBEDDING_MODEL, "input": [text, "short"]})
    assert response.status_code == 200
    assert embedder.calls == [("passage", 2)]


async def test_the_models_list_names_the_embedding_model_too(key: str, settings: Any) -> None:
    settings.QASSIST_EMBEDDING_MODEL = EMBEDDING_MODEL
    response = await AsyncClient().get("/v1/models", headers=headers(key))
    assert [m["id"] for m in response.json()["data"]] == [MODEL, EMBEDDING_MODEL]


async def test_embeddings_need_a_key(embedder: FakeEmbedder) -> None:
    response = await AsyncClient().post(
        "/v1/embeddings",
        data=json.dumps({"model": EMBEDDING_MODEL, "input": "x"}),
        content_type="application/json",
    )
    assert response.status_code == 401
