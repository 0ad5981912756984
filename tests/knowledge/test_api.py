"""The knowledge base over REST, and answers with sources in OpenAI's shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from pytest_django import Settings

from chat.models import Message
from knowledge import ingest
from knowledge.models import Chunk, Document, Passage
from tenants.models import Tenant
from tenants.services import api_key_create
from tests.chat.conftest import FakeEngine
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = b"# Travel policy\n\n## Hotels\n\nThe hotel cap per night is EUR 180.\n"
URL = "/v1/knowledge/documents"


@pytest.fixture
def key(tenant: Tenant) -> str:
    _, raw = api_key_create(tenant=tenant, name="docs")
    return raw


@pytest.fixture
def other_key(other_tenant: Tenant) -> str:
    _, raw = api_key_create(tenant=other_tenant, name="theirs")
    return raw


def auth(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


async def upload(raw: str, name: str = "travel.md", data: bytes = POLICY, **form: str) -> Any:
    return await AsyncClient().post(
        URL, {"file": SimpleUploadedFile(name, data), **form}, headers=auth(raw)
    )


async def index(document_id: str) -> None:
    document = await Document.objects.aget(pk=document_id.removeprefix("doc-"))
    await sync_to_async(ingest.document_index)(document_id=document.pk, version=document.version)


async def test_a_document_is_uploaded_listed_indexed_replaced_and_deleted(
    key: str, no_dispatch: list[object]
) -> None:
    response = await upload(key, title="Travel")
    assert response.status_code == 202
    created = response.json()
    assert created["object"] == "knowledge.document"
    assert created["status"] == "queued"
    assert created["title"] == "Travel"
    assert created["format"] == "markdown"
    doc_id = created["id"]
    await index(doc_id)
    got = (await AsyncClient().get(f"{URL}/{doc_id}", headers=auth(key))).json()
    assert got["status"] == "ready"
    assert got["passages"] == 1
    listed = (await AsyncClient().get(URL, headers=auth(key))).json()
    assert [d["id"] for d in listed["data"]] == [doc_id]
    assert listed["storage"]["used_bytes"] == len(POLICY)
    content = await AsyncClient().get(f"{URL}/{doc_id}/content", headers=auth(key))
    assert content.content == POLICY
    new = POLICY.replace(b"180", b"195")
    replaced = await AsyncClient().put(
        f"{URL}/{doc_id}",
        encode_multipart(BOUNDARY, {"file": SimpleUploadedFile("travel.md", new)}),
        content_type=MULTIPART_CONTENT,
        headers=auth(key),
    )
    assert replaced.status_code == 202
    assert replaced.json()["version"] == 2
    deleted = await AsyncClient().delete(f"{URL}/{doc_id}", headers=auth(key))
    assert deleted.json() == {"id": doc_id, "object": "knowledge.document.deleted", "deleted": True}
    assert not await Document.objects.aexists()
    assert not await Chunk.objects.aexists()


async def test_another_tenants_key_finds_no_document(
    key: str, other_key: str, no_dispatch: list[object]
) -> None:
    doc_id = (await upload(key)).json()["id"]
    for method, url in [
        ("get", f"{URL}/{doc_id}"),
        ("delete", f"{URL}/{doc_id}"),
        ("get", f"{URL}/{doc_id}/content"),
    ]:
        response = await getattr(AsyncClient(), method)(url, headers=auth(other_key))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert (await AsyncClient().get(URL, headers=auth(other_key))).json()["data"] == []
    assert await Document.objects.acount() == 1


async def test_bad_uploads_are_clear_errors(
    key: str, no_dispatch: list[object], settings: Settings
) -> None:
    lying = await upload(key, "report.pdf", b"\x89PNG\r\n\x1a\n0000")
    assert lying.status_code == 415
    assert lying.json()["error"]["message"] == "The file is named .pdf but is a PNG image."
    empty = await upload(key, "empty.txt", b"")
    assert empty.status_code == 415
    no_file = await AsyncClient().post(URL, {"title": "x"}, headers=auth(key))
    assert no_file.status_code == 400
    as_json = await AsyncClient().post(
        URL, json.dumps({"file": "x"}), content_type="application/json", headers=auth(key)
    )
    assert as_json.status_code == 400
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 1
    too_big = await upload(key, "big.txt", b"a" * (3 * 1024 * 1024))
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "file_too_large"
    duplicate = await upload(key)
    assert duplicate.status_code == 202
    again = await upload(key, "copy.md")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate_document"
    assert await Document.objects.acount() == 1


async def test_an_answer_carries_its_sources_in_the_extension_field(
    tenant: Tenant, key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "EUR 180 [1]."))
    doc_id = (await upload(key)).json()["id"]
    await index(doc_id)
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hotel cap?"}]}
    response = await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip
    data = response.json()
    assert data["choices"][0]["message"]["content"] == "EUR 180 [1]."
    source = data["sources"][0]
    assert source["number"] == 1
    assert source["document_id"] == doc_id
    assert source["where"] == "Hotels"
    assert source["cited"] is True
    question = await Message.objects.aget(role="user")
    assert question.grounding == "documents"
    assert await Passage.objects.filter(message=question).acount() == 1
    stream = await AsyncClient().post(
        "/v1/chat/completions", json.dumps({**body, "stream": True}),
        content_type="application/json", headers=auth(key),
    )  # fmt: skip
    text = b"".join([c async for c in stream.streaming_content]).decode()  # type: ignore[attr-defined]
    chunks = [json.loads(b[6:]) for b in text.split("\n\n") if b.startswith("data: {")]
    with_sources = [c for c in chunks if "sources" in c]
    assert len(with_sources) == 1
    assert with_sources[0]["choices"][0]["finish_reason"] == "stop"
    assert with_sources[0]["sources"][0]["cited"] is True
    detail = await AsyncClient().get(f"/v1/chat/completions/{data['id']}", headers=auth(key))
    assert detail.json()["sources"][0]["number"] == 1


async def test_without_documents_a_completion_has_no_sources_field(
    key: str,
    engine: FakeEngine,
) -> None:
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}]}
    response = await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip
    assert "sources" not in response.json()


async def test_uploads_larger_than_the_json_body_limit_are_taken(
    key: str, no_dispatch: list[object]
) -> None:
    """A file is bounded by QASSIST_KNOWLEDGE_MAX_FILE_MB, not by the 4 MiB of a JSON body nor
    Django's 2.5 MB for forms: a POST of 5 MB and a PUT (parsed from the stream) of 3 MB."""
    big = b"Travel policy.\n" + b"All trips are booked through the desk.\n" * 140_000
    assert len(big) > 5 * 2**20
    created = await upload(key, "big.txt", big)
    assert created.status_code == 202, created.content[:300]
    replaced = await AsyncClient().put(
        f"{URL}/{created.json()['id']}",
        encode_multipart(BOUNDARY, {"file": SimpleUploadedFile("big.txt", big[: 3 * 2**20])}),
        content_type=MULTIPART_CONTENT,
        headers=auth(key),
    )
    assert replaced.status_code == 202, replaced.content[:300]
    assert replaced.json()["bytes"] == 3 * 2**20


async def completion(key: str, **extra: Any) -> Any:
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "hotel cap per night?"}],
        **extra,
    }
    return await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip


async def test_a_reply_resting_on_a_passage_cites_it_after_its_text(
    key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    # The model answers without citing (as a 0.5B model does when not asked to).
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "It is EUR 180."))
    await index((await upload(key)).json()["id"])
    data = (await completion(key)).json()
    assert data["choices"][0]["message"]["content"] == "It is EUR 180. [1]"
    assert data["sources"][0]["cited"] is True
    detail = await AsyncClient().get(f"/v1/chat/completions/{data['id']}", headers=auth(key))
    assert detail.json()["choices"][0]["message"]["content"] == "It is EUR 180. [1]"

    stream = await completion(key, stream=True)
    text = b"".join([c async for c in stream.streaming_content]).decode()
    chunks = [json.loads(b[6:]) for b in text.split("\n\n") if b.startswith("data: {")]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p for p in pieces if p) == "It is EUR 180. [1]"
    assert pieces[-2] == " [1]"  # the citation is the last text, before the finish chunk
    assert chunks[-1]["sources"][0]["cited"] is True


async def test_a_reply_resting_on_no_passage_or_citing_itself_gets_no_citation(
    key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "I cannot say."))
    await index((await upload(key)).json()["id"])
    first = (await completion(key)).json()
    assert first["choices"][0]["message"]["content"] == "I cannot say."
    assert first["sources"][0]["cited"] is False
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "EUR 180 [1]."))
    second = (await completion(key)).json()
    assert second["choices"][0]["message"]["content"] == "EUR 180 [1]."


async def test_json_replies_are_never_given_a_citation(
    key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096))  # honours the constraint with minimal JSON
    await index((await upload(key)).json()["id"])
    schema = {"type": "object", "properties": {"cap": {"type": "string"}}, "required": ["cap"]}
    response = await completion(
        key,
        response_format={"type": "json_schema", "json_schema": {"name": "cap", "schema": schema}},
    )
    content = response.json()["choices"][0]["message"]["content"]
    assert json.loads(content) == {"cap": "x"}  # the fake's simplest valid JSON, nothing after


async def test_the_openai_client_reads_the_sentences_an_answer_rests_on(
    tenant: Tenant, key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    import openai.types.chat

    from tests.chat.test_api import through_openai

    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "At most EUR 180."))
    await index((await upload(key)).json()["id"])
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "What is the hotel cap per night?"}],
    }
    response = await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip
    completion = openai.types.chat.ChatCompletion.model_validate(response.json())
    assert completion.choices[0].message.content == "At most EUR 180. [1]"
    (source,) = (completion.model_extra or {})["sources"]
    assert source["cited"] is True
    (quote,) = source["quotes"]
    assert quote["text"] == "The hotel cap per night is EUR 180."
    passage = (await Chunk.objects.aget(pk=source["passage_id"])).text
    assert passage[quote["start"] : quote["end"]] == quote["text"]
    stream = await AsyncClient().post(
        "/v1/chat/completions", json.dumps({**body, "stream": True}),
        content_type="application/json", headers=auth(key),
    )  # fmt: skip
    raw = b"".join([c async for c in stream.streaming_content]).decode()  # type: ignore[attr-defined]
    chunks = list(through_openai(raw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "At most EUR 180. [1]"
    (last,) = [c for c in chunks if (c.model_extra or {}).get("sources")]
    assert last.model_extra["sources"][0]["quotes"][0]["text"] == quote["text"]


async def test_a_warned_reply_over_rest_carries_the_warning_and_no_citation(
    tenant: Tenant, key: str, use_engine: Any, no_dispatch: list[object]
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "At most EUR 95."))
    await index((await upload(key)).json()["id"])
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "What is the hotel cap per night?"}],
    }
    response = await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip
    data = response.json()
    content = data["choices"][0]["message"]["content"]
    assert content.startswith("At most EUR 95.\n\n*Not in the documents: 95.")
    assert data["sources"][0]["cited"] is False
    assert data["sources"][0]["quotes"] == []


@pytest.mark.parametrize("size", [5_000, 250_000], ids=["over-the-context", "over-the-chars"])
async def test_a_question_too_long_for_the_model_is_refused_before_it_is_embedded(
    key: str, use_engine: Any, no_dispatch: list[object], fake_embedder: Any, size: int
) -> None:
    """A 200,000-character question once cost 1.7 GB to embed for retrieval, then got its 400:
    the context check now comes first (issue #32)."""
    use_engine(FakeRunner(max_seq_tokens=4096))
    await index((await upload(key)).json()["id"])
    fake_embedder.calls.clear()
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "x" * size}]}
    response = await AsyncClient().post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json",
        headers=auth(key),
    )  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert fake_embedder.calls == []


@pytest.mark.parametrize("method", ["post", "put"])
async def test_a_3_mb_text_field_beside_the_file_is_a_413_not_a_500(
    key: str, no_dispatch: list[object], method: str
) -> None:
    """A 3 MB `title` (over Django's 2.5 MB for a form's fields) raised RequestDataTooBig, a 500
    (issue #32, finding 5); the file itself may be larger (the test above)."""
    target = URL
    if method == "put":
        target = f"{URL}/{(await upload(key)).json()['id']}"
    form = {"file": SimpleUploadedFile("travel.md", POLICY), "title": "t" * (3 * 2**20)}
    if method == "post":
        response = await AsyncClient().post(target, form, headers=auth(key))
    else:
        body = encode_multipart(BOUNDARY, form)
        response = await AsyncClient().put(
            target, body, content_type=MULTIPART_CONTENT, headers=auth(key)
        )
    assert response.status_code == 413, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "request_too_large"
    assert await Document.objects.acount() == (1 if method == "put" else 0)
