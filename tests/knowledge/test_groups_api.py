"""Who may read what over REST: an API key's document scope (the matrix of test_groups.py)."""

from __future__ import annotations

import json

import pytest
from django.http import Http404
from django.test import Client

from chat.services.api import api_completion_get, api_prepare, api_turn_start
from inference.types import ChatMessage
from knowledge.access import reader_for_api_key
from knowledge.models import Document
from tests.knowledge.test_groups import ASK_SALARY, key

pytestmark = pytest.mark.django_db(transaction=True)


URL = "/v1/knowledge/documents"


def rest(raw: str) -> dict[str, dict[str, str]]:
    return {"headers": {"Authorization": f"Bearer {raw}"}}


@pytest.mark.parametrize(
    ("scope", "with_hr", "sees"),
    [("all", False, True), ("groups", True, True), ("groups", False, False)],
)
def test_an_api_keys_scope_decides_which_documents_it_finds(docs, tenant, hr_group, scope,
                                                           with_hr, sees):  # fmt: skip
    _, raw = key(tenant, scope, [hr_group] if with_hr else [])
    client = Client()
    listed = client.get(URL, headers=rest(raw)["headers"]).json()
    assert ("Salary bands" in {d["title"] for d in listed["data"]}) is sees
    salary = docs["salary"].public_id
    assert client.get(f"{URL}/{salary}", headers=rest(raw)["headers"]).status_code == (
        200 if sees else 404
    )
    content = client.get(f"{URL}/{salary}/content", headers=rest(raw)["headers"])
    assert content.status_code == (200 if sees else 404)
    if not sees:
        assert client.delete(f"{URL}/{salary}", headers=rest(raw)["headers"]).status_code == 404
        assert Document.objects.filter(pk=docs["salary"].pk).exists()


def test_a_key_without_the_group_cannot_open_or_regroup_it(docs, tenant, hr_group):
    _, raw = key(tenant, "groups")
    salary = docs["salary"].public_id
    patched = Client().patch(
        f"{URL}/{salary}",
        json.dumps({"groups": None}),
        content_type="application/json",
        headers=rest(raw)["headers"],
    )
    assert patched.status_code == 404
    assert Document.objects.get(pk=docs["salary"].pk).audience == f"g:{hr_group.pk}"


def test_a_key_limits_documents_only_to_groups_it_covers(docs, tenant, hr_group):
    from django.core.files.uploadedfile import SimpleUploadedFile

    _, raw = key(tenant, "groups")
    refused = Client().post(URL, {"file": SimpleUploadedFile("x.md", b"# X\n\nx\n"),
                                  "groups": "HR"}, headers=rest(raw)["headers"])  # fmt: skip
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_group"
    _, hr_raw = key(tenant, "groups", [hr_group])
    taken = Client().post(URL, {"file": SimpleUploadedFile("y.md", b"# Y\n\ny\n"),
                                "groups": "HR"}, headers=rest(hr_raw)["headers"])  # fmt: skip
    assert taken.status_code == 202
    assert taken.json()["groups"] == ["HR"]


def test_a_completion_resting_on_the_group_is_404_to_a_key_without_it(docs, tenant, hr_group):
    hr_key, _ = key(tenant, "groups", [hr_group])
    plain_key, _ = key(tenant, "groups")
    messages = [ChatMessage("user", ASK_SALARY)]
    conversation, passages, _ = api_prepare(
        tenant=tenant, messages=messages, reader=reader_for_api_key(api_key=hr_key)
    )
    assert passages is not None
    assert any(p.chunk.document_id == docs["salary"].pk for p in passages.passages)
    turn = api_turn_start(tenant=tenant, api_key_id=hr_key.pk, messages=messages,
                                   passages=passages, conversation=conversation)  # fmt: skip
    _, blind = api_prepare(tenant=tenant, messages=messages,
                                    reader=reader_for_api_key(api_key=plain_key))[:2]  # fmt: skip
    assert blind is None or all(p.chunk.document_id != docs["salary"].pk for p in blind.passages)
    with pytest.raises(Http404):
        api_completion_get(tenant=tenant, session_id=turn.session.id,
                                    reader=reader_for_api_key(api_key=plain_key))  # fmt: skip
    api_completion_get(tenant=tenant, session_id=turn.session.id,
                                reader=reader_for_api_key(api_key=hr_key))  # fmt: skip
