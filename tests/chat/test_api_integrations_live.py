"""Integrations against a live qassist, as they are written: the official `openai` client's
structured output, tool calls, logprobs and embeddings, and LangChain's ChatOpenAI
(with_structured_output, bind_tools) and OpenAIEmbeddings pointed at it. Daphne on a free port,
the embedded model, the product's embedder (USE multilingual v3)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import numpy as np
import openai
import pytest
from pydantic import BaseModel, Field

from tests import needs
from tests.browser.conftest import (
    LiveServer,
    _free_port,
    _python,
    _server_env,
    _wait_until_up,
)

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
CHAT_MODEL = "smollm2-135m"
EMBEDDING_MODEL = "use-multilingual-v3"


class Severity(StrEnum):
    low = "low"
    high = "high"


class Reporter(BaseModel):
    name: str = Field(max_length=30)
    team: str = Field(max_length=30)


class Ticket(BaseModel):
    """A support ticket filed from a user's message. Bounded strings and lists: a grammar
    holds the reply to them, so it ends within max_tokens whatever a small model does."""

    title: str = Field(max_length=60)
    severity: Severity
    steps: list[Annotated[str, Field(max_length=60)]] = Field(min_length=1, max_length=3)
    hours: float
    reporter: Reporter


WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ASK = "My laptop will not start after the update. I am Ana from finance. File a ticket."


@dataclass
class Live:
    server: LiveServer
    key: str

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.server.url}/v1", api_key=self.key, max_retries=0, timeout=180
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    needs.embedded_model()  # skips (fails in CI) without it
    tmp = tmp_path_factory.mktemp("integrations-live")
    (tmp / "var").mkdir()
    env = _server_env(tmp, QASSIST_EMBEDDING_MODEL=EMBEDDING_MODEL)
    env["SECRET_KEY"] = secrets.token_urlsafe(40)
    _python(["manage.py", "migrate", "--noinput", "-v", "0"], env)
    _python(["manage.py", "create_tenant", "acme"], env)
    key = _python(["manage.py", "create_api_key", "acme"], env).stdout.strip().splitlines()[-1]
    port = _free_port()
    log = tmp / "daphne.log"
    daphne = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "qassist.asgi:application"]
    with log.open("w") as out:
        process = subprocess.Popen(  # noqa: S603
            [sys.executable, *daphne], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    server = LiveServer(f"http://127.0.0.1:{port}", {}, log)
    try:
        _wait_until_up(server, process)
        yield Live(server, key)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the openai client ---------------------------------------------------------------------


def test_parse_with_a_pydantic_model_gives_a_valid_instance(live: Live) -> None:
    completion = live.client().chat.completions.parse(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": ASK}],
        response_format=Ticket,
        max_tokens=600,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    ticket = choice.message.parsed
    assert isinstance(ticket, Ticket)
    assert 1 <= len(ticket.steps) <= 3
    assert Ticket.model_validate_json(choice.message.content or "") == ticket


def test_a_json_schema_reply_streams_and_joins_to_valid_json(live: Live) -> None:
    schema = Ticket.model_json_schema()
    stream = live.client().chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": ASK}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "ticket", "schema": schema, "strict": True},
        },
        max_tokens=600,
        temperature=0.8,
        seed=7,
        stream=True,
    )
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    assert len([p for p in pieces if p]) > 5  # it streamed, not one block
    jsonschema.validate(json.loads("".join(pieces)), schema)


def test_a_schema_the_grammar_cannot_enforce_is_a_bad_request_naming_it(live: Live) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        live.client().chat.completions.create(
            model=CHAT_MODEL,
            messages=[{"role": "user", "content": "age?"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "age", "schema": {"type": "integer", "minimum": 0}},
            },
        )
    assert caught.value.status_code == 400
    assert "minimum" in str(caught.value.body)


def get_weather(city: str, unit: str) -> str:
    return json.dumps(
        {"city": city, "temperature": 21 if unit == "celsius" else 70, "sky": "clear"}
    )


def test_a_tool_round_trip_calls_gets_the_result_and_answers(live: Live) -> None:
    client = live.client()
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    first = client.chat.completions.create(
        model=CHAT_MODEL,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=120,
        temperature=0,
    )
    assert first.choices[0].finish_reason == "tool_calls"
    message = first.choices[0].message
    (call,) = message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER_TOOL["function"]["parameters"])
    messages.append(
        {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [c.model_dump() for c in message.tool_calls or []],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)})
    final = client.chat.completions.create(
        model=CHAT_MODEL,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_tokens=60,
        temperature=0,
    )
    answer = final.choices[0].message
    assert answer.content
    assert not answer.tool_calls
    assert final.choices[0].finish_reason in ("stop", "length")
    # The model read the call and the function's result as Qwen2.5's template writes them.
    stored = [m.content or "" for m in client.chat.completions.messages.list(final.id).data]
    assert any(c.startswith("<tool_call>\n") and '"get_weather"' in c for c in stored)
    assert f"<tool_response>\n{get_weather(**arguments)}\n</tool_response>" in stored


def test_required_tool_choice_streams_well_formed_calls(live: Live) -> None:
    stream = live.client().chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": "Weather in Oslo and in Rome, in fahrenheit."}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=600,  # up to 8 calls (the grammar's bound) of a 40-character city each
        temperature=0,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for fragment in choice.delta.tool_calls or []:
            slot = calls.setdefault(fragment.index, {"name": "", "arguments": ""})
            if fragment.function and fragment.function.name:
                slot["name"] = fragment.function.name
            if fragment.function and fragment.function.arguments:
                slot["arguments"] += fragment.function.arguments
    assert finish == "tool_calls"
    assert calls
    for call in calls.values():
        assert call["name"] == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_TOOL["function"]["parameters"])


def test_logprobs_name_the_reply_tokens_and_greedy_takes_the_likeliest(live: Live) -> None:
    completion = live.client().chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": "Is Paris in France? Answer yes or no."}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    choice = completion.choices[0]
    assert choice.logprobs is not None
    assert choice.logprobs.content
    entries = choice.logprobs.content
    assert "".join(e.token for e in entries) == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
        assert entry.top_logprobs[0].token == entry.token  # greedy: the likeliest token
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-5


def test_embeddings_in_both_encodings_are_the_same_unit_vectors(live: Live) -> None:
    client = live.client()
    texts = ["How do I reset my password?", "如何重置我的密码？", "The cafeteria opens at noon."]
    default = client.embeddings.create(model=EMBEDDING_MODEL, input=texts)  # base64 on the wire
    floats = client.embeddings.create(model=EMBEDDING_MODEL, input=texts, encoding_format="float")
    a = np.array([d.embedding for d in default.data])
    b = np.array([d.embedding for d in floats.data])
    assert a.shape == (3, 512)
    assert np.allclose(a, b, atol=1e-6)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    similarity = a @ a.T
    assert similarity[0, 1] > similarity[0, 2]  # the same question in Chinese is closer
    assert default.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=EMBEDDING_MODEL, input="x", dimensions=256)
    assert "dimensions" in str(caught.value.body)


# --- LangChain ---------------------------------------------------------------------------------


def chat_model(live: Live, **kwargs: object):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        base_url=f"{live.server.url}/v1",
        api_key=live.key,
        model=CHAT_MODEL,
        temperature=0,
        max_retries=0,
        timeout=180,
        **kwargs,
    )


def test_langchain_with_structured_output_gives_the_pydantic_model(live: Live) -> None:
    structured = chat_model(live, max_tokens=600).with_structured_output(Ticket)
    ticket = structured.invoke(ASK)
    assert isinstance(ticket, Ticket)
    assert ticket.severity in (Severity.low, Severity.high)


def test_langchain_bind_tools_returns_tool_calls_with_arguments(live: Live) -> None:
    from langchain_core.tools import tool

    @tool
    def lookup_weather(city: str, unit: str) -> str:
        """The current weather in a city; unit is celsius or fahrenheit."""
        return get_weather(city, unit)

    model = chat_model(live, max_tokens=200).bind_tools([lookup_weather], tool_choice="required")
    message = model.invoke("What is the weather in Berlin?")
    assert message.tool_calls
    call = message.tool_calls[0]
    assert call["name"] == "lookup_weather"
    assert set(call["args"]) == {"city", "unit"}
    assert all(isinstance(v, str) for v in call["args"].values())
    assert lookup_weather.invoke(call["args"])


def test_langchain_openai_embeddings_embed_documents_and_queries(live: Live) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    embeddings = langchain_openai.OpenAIEmbeddings(
        base_url=f"{live.server.url}/v1",
        api_key=live.key,
        model=EMBEDDING_MODEL,
        # qassist embeds text; LangChain would otherwise send tiktoken ids of OpenAI's models.
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    documents = embeddings.embed_documents(["Expense reports are due Friday.", "报销单周五截止。"])
    query = embeddings.embed_query("When are expense reports due?")
    assert len(documents) == 2
    assert all(len(v) == 512 for v in documents)
    assert len(query) == 512
    assert float(np.dot(query, documents[0])) > 0.3
