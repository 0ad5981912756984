"""The REST API (/v1) through the ASGI application, with the fake runner behind an in-process
engine: OpenAI's shapes, errors, limits, storage and tenant scoping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chat.api import schemas
from chat.models import CachedReply, ChatSession, Message
from inference.types import Delta, Done, Event, Failed, Queued
from inference.worker import Submission
from tenants.models import ApiKey, Tenant, UsageRecord
from tenants.services import api_key_create, api_key_revoke
from tests.chat.conftest import FakeEngine
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "smollm2-135m"


def headers(raw_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw_key}"}


async def post(raw_key: str | None, body: Any, **extra: Any) -> Any:
    client = AsyncClient()
    return await client.post(
        "/v1/chat/completions",
        data=json.dumps(body) if not isinstance(body, bytes) else body,
        content_type="application/json",
        headers=headers(raw_key) if raw_key else {},
        **extra,
    )


def ask(content: str = "hello", **params: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **params}


async def sse_events(response: Any) -> list[Any]:
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    events = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block.removeprefix("data: ")
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def error_of(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/json"
    body = response.json()
    schemas.ErrorResponse.model_validate(body)
    return dict(body["error"])


@pytest.fixture
def key(api_key: tuple[ApiKey, str]) -> str:
    return api_key[1]


# --- the happy paths ----------------------------------------------------------------------


async def test_models_lists_the_served_model(key: str) -> None:
    response = await AsyncClient().get("/v1/models", headers=headers(key))
    assert response.status_code == 200
    body = schemas.ModelList.model_validate(response.json())
    assert body.data[0].id == MODEL  # then the embedding model


async def test_a_completion_answers_in_openais_shape_and_is_stored_for_the_key(
    engine: FakeEngine, api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    response = await post(api_key[1], ask("hi there", user="alice@example.com"))

    assert response.status_code == 200
    body = schemas.ChatCompletion.model_validate(response.json())
    assert body.choices[0].message.content == "echo: hi there"
    assert body.choices[0].finish_reason == "stop"
    assert body.usage.completion_tokens == len("echo: hi there")
    assert body.usage.total_tokens == body.usage.prompt_tokens + body.usage.completion_tokens
    assert body.id.startswith("chatcmpl-")

    session = await sync_to_async(ChatSession.objects.get)()
    assert session.api_key_id == api_key[0].pk
    assert session.tenant_id == tenant.pk
    assert session.user_id is None
    assert session.external_user == "alice@example.com"
    stored = await sync_to_async(
        lambda: [(m.role, m.content, m.status) for m in session.messages.order_by("id")]
    )()
    assert stored == [("user", "hi there", "complete"), ("assistant", "echo: hi there", "complete")]
    usage = await sync_to_async(UsageRecord.objects.get)()
    assert (usage.api_key_id, usage.completion_tokens) == (api_key[0].pk, len("echo: hi there"))


async def test_a_streamed_completion_sends_chunks_then_usage_then_done(
    engine: FakeEngine, key: str
) -> None:
    response = await post(
        key, ask("stream me", stream=True, stream_options={"include_usage": True})
    )

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = await sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [schemas.ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream me"
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len("echo: stream me")
    assert len({c.id for c in chunks}) == 1


async def test_a_stream_without_include_usage_has_no_usage_chunk(
    engine: FakeEngine, key: str
) -> None:
    events = await sse_events(await post(key, ask("x", stream=True)))
    assert all(e == "[DONE]" or e.get("usage") is None for e in events)


async def test_the_tenants_system_prompt_comes_first_and_the_callers_after(
    engine: FakeEngine, key: str, tenant: Tenant
) -> None:
    tenant.system_prompt = "You work for Acme."
    await sync_to_async(tenant.save)()
    body = ask("q")
    body["messages"].insert(0, {"role": "developer", "content": "Be terse."})
    response = await post(key, body)
    assert response.status_code == 200
    rendered = list(engine.runner.prompts)[-1]
    assert rendered.index("You work for Acme.") < rendered.index("Be terse.") < rendered.index("q")


async def test_text_parts_are_joined_as_one_message(engine: FakeEngine, key: str) -> None:
    content = [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]
    response = await post(key, {"model": MODEL, "messages": [{"role": "user", "content": content}]})
    assert response.json()["choices"][0]["message"]["content"] == "echo: part one, part two"


async def test_max_tokens_and_stop_are_honoured(engine: FakeEngine, key: str) -> None:
    short = await post(key, ask("abcdefgh", max_tokens=4))
    assert short.json()["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "echo", "refusal": None},
        "finish_reason": "length",
        "logprobs": None,
    }
    stopped = await post(key, ask("abcdefgh", stop=["cd"], max_completion_tokens=50))
    assert stopped.json()["choices"][0]["message"]["content"] == "echo: ab"


# --- cached replies ------------------------------------------------------------------------


async def test_a_cached_reply_answers_a_single_question_and_costs_nothing(
    engine: FakeEngine, key: str, tenant: Tenant
) -> None:
    await sync_to_async(CachedReply.objects.create)(
        tenant=tenant, question="What is the VPN address?", answer="vpn.acme.example"
    )
    response = await post(key, ask("what is the vpn address"))
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "vpn.acme.example"
    assert body["usage"]["total_tokens"] == 0
    assert engine.runner.batches == []
    reply = await sync_to_async(Message.objects.get)(role="assistant")
    assert reply.served_from_cache


async def test_a_cached_reply_is_not_replayed_into_the_callers_own_context(
    engine: FakeEngine, key: str, tenant: Tenant
) -> None:
    await sync_to_async(CachedReply.objects.create)(
        tenant=tenant, question="What is the VPN address?", answer="vpn.acme.example"
    )
    with_system = ask("what is the vpn address")
    with_system["messages"].insert(0, {"role": "system", "content": "Answer in French."})
    multi_turn = ask("what is the vpn address")
    multi_turn["messages"][0:0] = [
        {"role": "user", "content": "I mean the old one."},
        {"role": "assistant", "content": "Which service?"},
    ]
    for body in (with_system, multi_turn):
        response = await post(key, body)
        assert response.json()["choices"][0]["message"]["content"].startswith("echo: ")


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({"model": MODEL, "messages": [{"role": "user", "content": None}]}, "messages[0].content"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
        ),
        (
            {"model": MODEL, "messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]},
            "messages",
        ),
        ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({**ask(), "n": 2}, "n"),
        ({**ask(), "temperature": 3}, "temperature"),
        ({**ask(), "max_tokens": 0}, "max_tokens"),
        ({**ask(), "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({**ask(), "stop": [""]}, "stop"),
        ({**ask(), "frobnicate": True}, "frobnicate"),
        ({**ask(), "tools": [{"type": "function"}]}, "tools[0].function"),
        ({**ask(), "logit_bias": {"42": 1}}, "logit_bias"),
        ({**ask(), "response_format": {"type": "yaml"}}, "response_format"),
        (
            {"model": MODEL, "messages": [{"role": "assistant", "content": "only me"}]},
            "messages",
        ),
        ({"model": MODEL, "messages": [{"role": "user", "content": "a\u0000b"}]}, None),
    ],
)
async def test_an_invalid_request_is_a_400_naming_the_parameter(
    engine: FakeEngine, key: str, body: dict[str, Any], param: str | None
) -> None:
    response = await post(key, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    assert error["message"]
    assert await sync_to_async(ChatSession.objects.count)() == 0


async def test_a_body_that_is_not_json_is_a_400(key: str) -> None:
    response = await post(key, b"{not json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


# --- bodies that once gave a 500 -------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
SURROGATE = b'{"model": "smollm2-135m", "messages": [{"role": "user", "content": "a\\ud800b"}]}'


def padded(size: int) -> bytes:
    """A valid request whose JSON is padded with spaces to `size` bytes."""
    body = json.dumps(ask("hello")).encode()
    return body[:-1] + b" " * (size - len(body)) + b"}"


async def test_a_body_between_djangos_form_limit_and_the_apis_is_served(
    engine: FakeEngine, key: str
) -> None:
    """Django refuses form bodies over 2.5 MB; the API's own limit is 4 MiB (docs/api.md)."""
    response = await post(key, padded(3 * 2**20))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "echo: hello"


@pytest.mark.parametrize("size", [4 * 2**20 + 1, 6 * 2**20])
async def test_a_body_over_the_apis_limit_is_a_413_in_openais_shape(
    engine: FakeEngine, key: str, size: int
) -> None:
    response = await post(key, padded(size))
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "request_too_large"
    assert error["type"] == "invalid_request_error"
    assert await sync_to_async(ChatSession.objects.count)() == 0


async def test_a_lone_surrogate_is_a_400_naming_the_message(engine: FakeEngine, key: str) -> None:
    response = await post(key, SURROGATE)
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content"
    assert "surrogate" in error["message"]
    assert await sync_to_async(ChatSession.objects.count)() == 0


@pytest.mark.parametrize("body", [DEEP, b'{"model": ' + b'{"a": ' * 65 + b"1" + b"}" * 66])
async def test_json_nested_too_deep_is_a_400(engine: FakeEngine, key: str, body: bytes) -> None:
    response = await post(key, body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


async def test_a_batch_with_a_lone_surrogate_or_deep_nesting_is_a_400(key: str) -> None:
    for body in (SURROGATE.replace(b'{"model"', b'{"requests": [{"model"') + b"]}", DEEP):
        response = await AsyncClient().post(
            "/v1/batches", data=body, content_type="application/json", headers=headers(key)
        )
        assert response.status_code == 400, response.content
        assert error_of(response)["type"] == "invalid_request_error"


async def test_an_unknown_model_is_a_404(key: str) -> None:
    response = await post(key, {**ask(), "model": "gpt-4o"})
    assert response.status_code == 404
    assert error_of(response)["code"] == "model_not_found"


@pytest.mark.parametrize("path", ["/v1/", "/v1/completions", "/v1/audio/speech", "/v1/x/y"])
async def test_an_unknown_route_is_a_json_404(path: str, key: str) -> None:
    response = await AsyncClient().post(path, headers=headers(key))
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


async def test_a_wrong_method_is_a_json_405(key: str) -> None:
    response = await AsyncClient().get("/v1/chat/completions", headers=headers(key))
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


async def test_a_prompt_beyond_the_context_is_context_length_exceeded(
    use_engine: Any, key: str
) -> None:
    use_engine(FakeRunner(max_seq_tokens=64))
    response = await post(key, ask("a long message " * 10))
    assert response.status_code == 400
    error = error_of(response)
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert await sync_to_async(ChatSession.objects.count)() == 0


class RefusingClient:
    """An engine client that answers every request with one failure."""

    def __init__(self, code: str) -> None:
        self.code = code

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        yield Failed(sub.request_id, self.code, "not now", retry_after=7.0)

    async def served_models(self) -> list[str]:
        return []

    async def cancel(self, request_id: str) -> None:
        pass

    def at_capacity(self, model: str = "") -> bool:
        return False  # its refusals come from the engine path

    async def health(self) -> dict[str, Any]:
        return {"ok": True}


@pytest.mark.parametrize("code", ["busy", "worker_down"])
async def test_a_busy_or_absent_engine_is_a_503(code: str, key: str) -> None:
    from inference.service import set_engine_client

    set_engine_client(RefusingClient(code))
    try:
        for stream in (False, True):
            response = await post(key, ask("x", stream=stream))
            assert response.status_code == 503
            assert error_of(response)["code"] == code
        assert response["Retry-After"] == "7"
    finally:
        set_engine_client(None)
    reply = await sync_to_async(Message.objects.filter(role="assistant").first)()
    assert reply is not None
    assert reply.status == "error"


class FullClient(RefusingClient):
    """An engine client whose queue is full: admission refuses before anything is stored."""

    def __init__(self) -> None:
        super().__init__("internal")  # never reached

    def at_capacity(self, model: str = "") -> bool:
        return True


async def test_a_full_queue_is_a_503_at_admission_and_nothing_is_stored(key: str) -> None:
    from inference.service import set_engine_client

    set_engine_client(FullClient())
    try:
        response = await post(key, ask("x"))
    finally:
        set_engine_client(None)
    assert response.status_code == 503
    assert error_of(response)["code"] == "busy"
    assert response["Retry-After"] == "5"
    assert await sync_to_async(ChatSession.objects.count)() == 0
    refusal = await sync_to_async(UsageRecord.objects.get)()
    assert (refusal.status, refusal.reason) == ("rejected", "busy")


# --- keys ----------------------------------------------------------------------------------------


async def test_no_key_or_a_wrong_key_is_a_401(key: str) -> None:
    for auth in ({}, {"Authorization": "Bearer qa_nope"}, {"Authorization": key}):
        response = await AsyncClient().post(
            "/v1/chat/completions", data=ask(), content_type="application/json", headers=auth
        )
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"


async def test_a_revoked_key_or_a_deactivated_tenant_is_a_401(
    engine: FakeEngine, api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    assert (await post(api_key[1], ask())).status_code == 200
    await sync_to_async(api_key_revoke)(api_key=api_key[0])
    assert (await post(api_key[1], ask())).status_code == 401

    _fresh, raw = await sync_to_async(api_key_create)(tenant=tenant, name="second")
    tenant.active = False
    await sync_to_async(tenant.save)()
    assert (await post(raw, ask())).status_code == 401


async def test_a_completion_is_retrievable_by_its_tenant_only(
    engine: FakeEngine, key: str, other_tenant: Tenant
) -> None:
    made = (await post(key, ask("keep me"))).json()
    mine = await AsyncClient().get(f"/v1/chat/completions/{made['id']}", headers=headers(key))
    assert mine.status_code == 200
    assert mine.json()["choices"][0]["message"]["content"] == "echo: keep me"
    messages = await AsyncClient().get(
        f"/v1/chat/completions/{made['id']}/messages", headers=headers(key)
    )
    assert [m["content"] for m in messages.json()["data"]] == ["keep me"]

    _, theirs = await sync_to_async(api_key_create)(tenant=other_tenant, name="globex")
    for path in (
        f"/v1/chat/completions/{made['id']}",
        f"/v1/chat/completions/{made['id']}/messages",
    ):
        response = await AsyncClient().get(path, headers=headers(theirs))
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    garbage = await AsyncClient().get("/v1/chat/completions/chatcmpl-zzz", headers=headers(key))
    assert garbage.status_code == 404


# --- the description -------------------------------------------------------------------------


async def test_the_openapi_description_is_generated_from_the_types() -> None:
    response = await AsyncClient().get("/v1/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    assert spec["openapi"].startswith("3.1")
    request = spec["components"]["schemas"]["ChatCompletionRequest"]
    assert request["additionalProperties"] is False
    assert set(request["required"]) == {"model", "messages"}
    assert "max_completion_tokens" in request["properties"]
    post_op = spec["paths"]["/v1/chat/completions"]["post"]
    assert {"200", "400", "401", "404", "429", "503"} <= set(post_op["responses"])
    assert set(post_op["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}


class QueuedClient(RefusingClient):
    """An engine client whose request waits in line (twice told), then `ending` happens."""

    def __init__(self, ending: str = "reply") -> None:
        super().__init__("busy")
        self.ending = ending

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        rid = sub.request_id
        yield Queued(rid, 2, 12.5)
        yield Queued(rid, 1, None)  # unknown, as before the engine measured its steps
        if self.ending == "busy":
            yield Failed(rid, "busy", "The assistant is busy: waited 90 s.", retry_after=4.5)
            return
        yield Delta(rid, "then ")
        yield Delta(rid, "me")
        yield Done(rid, "stop", 10, 2)


async def queued_response(body: dict[str, Any], key: str, ending: str = "reply") -> Any:
    from inference.service import set_engine_client

    set_engine_client(QueuedClient(ending))
    try:
        response = await post(key, body)
        if body.get("stream"):
            raw = b"".join([chunk async for chunk in response.streaming_content])
            return response, raw.decode()
        return response, None
    finally:
        set_engine_client(None)


def through_openai(raw: str) -> Any:
    """The `openai` client reading `raw` as the body of a stream (over its own HTTP client)."""
    import httpx2
    import openai

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"Content-Type": "text/event-stream"}, text=raw)

    client = openai.OpenAI(
        base_url="http://qassist.test/v1",
        api_key="qa_test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        max_retries=0,
    )
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True
    )


async def test_a_stream_waiting_in_line_tells_its_place_and_estimate_as_comments(
    key: str,
) -> None:
    response, raw = await queued_response(ask("x", stream=True), key)
    assert response.status_code == 200
    blocks = [b for b in raw.split("\n\n") if b]
    assert blocks[:2] == [
        ': queued {"position": 2, "estimated_wait": 12.5}',
        ': queued {"position": 1, "estimated_wait": null}',
    ]
    # Then the reply as before: the role chunk once it starts, its text, [DONE].
    chunks = [json.loads(b.removeprefix("data: ")) for b in blocks[2:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks) == "then me"
    assert blocks[-1] == "data: [DONE]"
    # SSE clients skip comments: the `openai` client reads the same reply.
    text = "".join(c.choices[0].delta.content or "" for c in through_openai(raw) if c.choices)
    assert text == "then me"


async def test_a_whole_reply_that_waited_in_line_is_one_json_body(key: str) -> None:
    response, _ = await queued_response(ask("x"), key)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "then me"


async def _hang_up_while_waiting_in_line(
    use_engine: Any, key: str, body: dict[str, Any], *, unread: list[object] | None = None
) -> tuple[Message, list[str]]:
    """Post `body` while the one sequence is taken, hang up once it waits in the engine's
    queue, and return its stored reply and what the model was asked to answer. With `unread`
    (the server patched not to read responses, keeping them there), hang up once the view
    has returned its response."""
    from asgiref.testing import ApplicationCommunicator

    from qassist.asgi import application

    sampled: list[str] = []

    def reply_for(prompt: str) -> str:
        sampled.append(prompt)
        return "w" * 300 if prompt == "first" else "never"

    fake = use_engine(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=reply_for))
    first = asyncio.ensure_future(post(key, ask("first")))
    while "first" not in sampled:  # noqa: ASYNC110  (the engine thread's state: no event)
        await asyncio.sleep(0.01)
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"authorization", f"Bearer {key}".encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": raw, "more_body": False})
    worker = fake.client.worker
    assert worker is not None
    while not worker.engine.scheduler.waiting:  # noqa: ASYNC110  (it waits in line)
        await asyncio.sleep(0.01)
    while unread is not None and not unread:  # noqa: ASYNC110  (the view has returned)
        await asyncio.sleep(0.01)
    await app.send_input({"type": "http.disconnect"})
    await app.wait(timeout=5)
    reply = await sync_to_async(
        lambda: Message.objects.filter(role="assistant").order_by("-id").first()
    )()
    assert reply is not None
    assert (await first).status_code == 200
    return reply, sampled


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_hangs_up_while_waiting_in_line_leaves_the_queue(
    use_engine: Any, key: str, stream: bool
) -> None:
    # Issue #31, Stop on REST (the client hangs up): stored as stopped, never run.
    reply, sampled = await _hang_up_while_waiting_in_line(
        use_engine, key, ask("second", stream=stream)
    )
    assert (reply.content, reply.status, reply.finish_reason) == (
        "",
        Message.Status.INTERRUPTED,
        "cancelled",
    )
    assert set(sampled) == {"first"}  # it never ran


async def test_a_client_gone_before_the_server_reads_the_stream_leaves_the_queue(
    use_engine: Any, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The view has returned the stream, the server has not begun to read it, the client hangs
    # up: Django's handler drops the response unread (no `close`, the stream never starts).
    # The generation is closed all the same (qassist.after_response), not left to run for
    # nobody until garbage collection; the responses are kept here so none is collected.
    from django.core.handlers.asgi import ASGIHandler

    kept: list[object] = []

    async def never_read(self: ASGIHandler, response: object, send: object) -> None:
        kept.append(response)
        await asyncio.Event().wait()

    monkeypatch.setattr(ASGIHandler, "send_response", never_read)
    reply, sampled = await _hang_up_while_waiting_in_line(
        use_engine, key, ask("second", stream=True), unread=kept
    )
    assert (reply.status, reply.finish_reason) == (Message.Status.INTERRUPTED, "cancelled")
    assert set(sampled) == {"first"}  # it never ran


async def test_a_stream_refused_busy_after_waiting_in_line_ends_with_an_error_event(
    key: str,
) -> None:
    import openai

    response, raw = await queued_response(ask("x", stream=True), key, ending="busy")
    assert response.status_code == 200  # the stream opened to tell its place in line
    blocks = [b for b in raw.split("\n\n") if b]
    assert [b.startswith(": queued") for b in blocks] == [True, True, False]
    error = json.loads(blocks[-1].removeprefix("data: "))["error"]
    assert error["code"] == "busy"
    with pytest.raises(openai.APIError, match="busy"):
        list(through_openai(raw))
