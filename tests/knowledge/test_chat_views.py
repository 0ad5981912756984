"""Company knowledge in the chat page: attaching files to a conversation, and opening a reply's
sources (a passage, a document's file). Who may see what: the user's current tenant, where
they are an active member; a conversation's attachments for its owner alone. Anything else is
a 404, never a 403."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from chat.models import ChatSession
from knowledge.models import Chunk, Document, KnowledgeBase
from tenants.models import Membership, Tenant
from tests.knowledge.conftest import Upload

pytestmark = pytest.mark.django_db

HANDBOOK = "# Handbook\n\n## Travel\n\nThe hotel cap per night is EUR 180.\n"
NOTES = "# Project Falcon\n\n## Budget\n\nProject Falcon has a budget of 42 parrots.\n"
HTML = b"<html><body><h1>Guide</h1><p>Hello</p><script>alert(1)</script></body></html>"


def logged_in(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def attach(client: Client, session: ChatSession, name: str, data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    return client.post(
        reverse("chat:session_documents", args=[session.id]),
        {"file": SimpleUploadedFile(name, raw)},
        headers={"accept": "application/json"},
    )


def passage_url(chunk: Chunk) -> str:
    return reverse("chat:passage", args=[chunk.pk])


def file_url(document: Document) -> str:
    return reverse("chat:document_file", args=[document.pk])


@pytest.fixture
def conversation(member: User, tenant: Tenant) -> ChatSession:
    return ChatSession.objects.create(user=member, tenant=tenant, title="Falcon")


@pytest.fixture
def handbook(tenant: Tenant, owner: User, upload: Upload) -> Document:
    """A tenant admin's document: the tenant's knowledge base."""
    return upload(tenant, "handbook.md", HANDBOOK, user=owner)


@pytest.fixture
def attached(member: User, tenant: Tenant, conversation: ChatSession, upload: Upload) -> Document:
    """A file `member` attached to their conversation."""
    return upload(tenant, "falcon.md", NOTES, session_id=conversation.id, user=member)


def first_chunk(document: Document) -> Chunk:
    chunk = document.chunks.first()
    assert chunk is not None
    return chunk


# --- opening a source ----------------------------------------------------------------------------


def test_a_member_opens_a_passage_of_the_tenants_documents(
    member: User, handbook: Document
) -> None:
    chunk = first_chunk(handbook)
    response = logged_in(member).get(passage_url(chunk))
    assert response.status_code == 200
    body = response.json()
    assert body["title"] == "Handbook"
    assert body["where"] == "Travel"
    assert "EUR 180" in body["text"]
    assert body["document"] == {
        "id": handbook.public_id,
        "title": "Handbook",
        "filename": "handbook.md",
        "download_url": file_url(handbook),
        "origin": None,  # uploaded, not synced from a source
        "origin_url": None,
    }


def test_the_owner_of_a_conversation_opens_its_attached_passage(
    member: User, attached: Document
) -> None:
    response = logged_in(member).get(passage_url(first_chunk(attached)))
    assert response.status_code == 200
    assert "42 parrots" in response.json()["text"]


@pytest.mark.parametrize("who", ["outsider", "ex_member", "other_tenant_current", "inactive"])
def test_a_passage_is_404_for_anyone_outside_the_tenant(
    who: str,
    member: User,
    outsider: User,
    other_tenant: Tenant,
    tenant: Tenant,
    handbook: Document,
) -> None:
    client = logged_in(outsider)
    if who == "ex_member":
        Membership.objects.filter(user=member).delete()
        client = logged_in(member)
    elif who == "other_tenant_current":
        # A member of both who works in the other one now: acme's sources are not shown there.
        Membership.objects.create(user=member, tenant=other_tenant)
        client = logged_in(member)
        session = client.session
        session["tenant"] = other_tenant.slug
        session.save()
    elif who == "inactive":
        tenant.active = False
        tenant.save()
        client = logged_in(member)
    chunk = first_chunk(handbook)
    for url in (passage_url(chunk), file_url(handbook)):
        response = client.get(url, headers={"accept": "application/json"})
        assert response.status_code == 404, (who, url)
        assert "180" not in response.content.decode()


def test_a_colleague_cannot_open_anothers_attached_document_or_passage(
    owner: User, attached: Document
) -> None:
    colleague = logged_in(owner)  # same tenant, even its admin
    chunk = first_chunk(attached)
    passage = colleague.get(passage_url(chunk), headers={"accept": "application/json"})
    assert passage.status_code == 404
    assert passage.json() == {"error": {"code": "not_found", "message": "No such passage."}}
    download = colleague.get(file_url(attached), headers={"accept": "application/json"})
    assert download.status_code == 404
    assert "parrots" not in download.content.decode()
    listed = colleague.get(reverse("chat:session_documents", args=[attached.session_id]))
    assert listed.status_code == 404
    removed = colleague.delete(reverse("chat:attachment", args=[attached.pk]))
    assert removed.status_code == 404
    assert Document.objects.filter(pk=attached.pk).exists()


def test_a_passage_needs_a_login(handbook: Document) -> None:
    response = Client().get(passage_url(first_chunk(handbook)))
    assert response.status_code == 401
    download = Client().get(file_url(handbook))
    assert download.status_code == 302  # a person is sent to log in


def test_a_document_downloads_as_an_attachment_and_html_is_never_rendered(
    member: User, tenant: Tenant, upload: Upload, owner: User
) -> None:
    markdown = upload(tenant, "规章 handbook.md", HANDBOOK, user=owner)
    response = logged_in(member).get(file_url(markdown))
    assert response.status_code == 200
    assert response.content == HANDBOOK.encode()
    assert response["Content-Disposition"].startswith("attachment;")
    assert "filename*=UTF-8''%E8%A7%84%E7%AB%A0%20handbook.md" in response["Content-Disposition"]

    page = upload(tenant, "guide.html", HTML, user=owner)
    response = logged_in(member).get(file_url(page))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
    assert response.content == HTML


# --- attaching files ---------------------------------------------------------------------------


def test_a_file_is_attached_listed_with_its_status_and_removed(
    member: User, conversation: ChatSession, no_dispatch: list[tuple[object, int]]
) -> None:
    client = logged_in(member)
    response = attach(client, conversation, "falcon.md", NOTES)
    assert response.status_code == 202
    body = response.json()["document"]
    assert body["status"] == "queued"
    assert body["filename"] == "falcon.md"
    document = Document.objects.get(session=conversation)
    assert body["id"] == document.public_id
    assert no_dispatch == [(document.pk, 1)]  # indexed by the Celery task, as any upload
    assert document.uploaded_by == member

    Document.objects.filter(pk=document.pk).update(status="indexing", progress=40)
    listed = client.get(reverse("chat:session_documents", args=[conversation.id])).json()
    assert [(d["status"], d["progress"]) for d in listed["documents"]] == [("indexing", 40)]

    removed = client.delete(body["url"])
    assert removed.status_code == 200
    assert removed.json() == {"deleted": True, "id": document.public_id}
    assert not Document.objects.filter(pk=document.pk).exists()


def test_several_files_are_attached_and_listed_in_order(
    member: User, conversation: ChatSession
) -> None:
    client = logged_in(member)
    assert attach(client, conversation, "a.md", "# A\n\nalpha").status_code == 202
    assert attach(client, conversation, "b.txt", "beta").status_code == 202
    listed = client.get(reverse("chat:session_documents", args=[conversation.id])).json()
    assert [d["filename"] for d in listed["documents"]] == ["a.md", "b.txt"]


def test_a_failed_file_says_why(member: User, conversation: ChatSession, upload: Upload) -> None:
    upload(
        conversation.tenant, "empty.md", "# \n", session_id=conversation.id, user=member
    )  # no text to search: indexing fails
    listed = logged_in(member).get(reverse("chat:session_documents", args=[conversation.id]))
    [document] = listed.json()["documents"]
    assert document["status"] == "failed"
    assert document["error"] == "The file holds no text."


@pytest.mark.parametrize(
    ("name", "data", "status", "code"),
    [
        ("photo.pdf", b"\x89PNG\r\n\x1a\n" + b"0" * 20, 415, "unsupported_file"),
        ("empty.txt", b"", 415, "unsupported_file"),
        ("tool.exe", b"MZ\x90\x00" + bytes(range(256)) * 4, 415, "unsupported_file"),
    ],
)
def test_a_bad_file_is_refused_with_its_reason(
    member: User, conversation: ChatSession, name: str, data: bytes, status: int, code: str
) -> None:
    response = attach(logged_in(member), conversation, name, data)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert not Document.objects.exists()


def test_a_too_large_file_is_refused(
    member: User, conversation: ChatSession, settings: Settings
) -> None:
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 1
    response = attach(logged_in(member), conversation, "big.txt", b"word " * 300_000)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "file_too_large"
    assert "at most 1.0 MB" in error["message"]
    # Past the limit by far, the request is refused on its length before the form is read.
    huge = attach(logged_in(member), conversation, "huge.txt", b"x" * 3_000_000)
    assert huge.status_code == 413
    assert huge.json()["error"]["code"] == "file_too_large"


def test_the_same_file_twice_and_past_the_users_limit_are_refused(
    member: User, conversation: ChatSession, settings: Settings
) -> None:
    client = logged_in(member)
    assert attach(client, conversation, "falcon.md", NOTES).status_code == 202
    again = attach(client, conversation, "falcon-copy.md", NOTES)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate_document"
    assert "already uploaded" in again.json()["error"]["message"]

    settings.QASSIST_ATTACHMENTS_MAX_MB = 0
    full = attach(client, conversation, "other.md", "# Other\n\ntext")
    assert full.status_code == 413
    assert full.json()["error"]["code"] == "attachment_limit"


def test_attaching_is_refused_while_the_tenants_documents_are_off(
    member: User, tenant: Tenant, conversation: ChatSession
) -> None:
    KnowledgeBase.objects.create(tenant=tenant, mode=KnowledgeBase.Mode.OFF)
    response = attach(logged_in(member), conversation, "falcon.md", NOTES)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "knowledge_off"


def test_a_form_without_a_file_or_not_multipart_is_a_clear_400(
    member: User, conversation: ChatSession
) -> None:
    client = logged_in(member)
    url = reverse("chat:session_documents", args=[conversation.id])
    no_file = client.post(url, {"title": "x"})
    assert no_file.status_code == 400
    assert no_file.json()["error"]["code"] == "invalid_upload"
    as_json = client.post(url, json.dumps({"file": "x"}), content_type="application/json")
    assert as_json.status_code == 400
    assert as_json.json()["error"]["code"] == "invalid_upload"


def test_attaching_needs_the_csrf_token(member: User, conversation: ChatSession) -> None:
    client = logged_in(member, enforce_csrf_checks=True)
    response = attach(client, conversation, "falcon.md", NOTES)
    assert response.status_code == 403
    assert not Document.objects.exists()


@pytest.mark.parametrize("whose", ["colleague", "outsider"])
def test_a_file_cannot_be_attached_to_someone_elses_conversation(
    whose: str, owner: User, outsider: User, conversation: ChatSession
) -> None:
    client = logged_in(owner if whose == "colleague" else outsider)
    response = attach(client, conversation, "falcon.md", NOTES)
    assert response.status_code == 404
    assert not Document.objects.exists()


def test_an_archived_conversation_lists_its_files_but_takes_no_more(
    member: User, conversation: ChatSession, attached: Document
) -> None:
    conversation.archived = True
    conversation.save()
    client = logged_in(member)
    listed = client.get(reverse("chat:session_documents", args=[conversation.id]))
    assert [d["id"] for d in listed.json()["documents"]] == [attached.public_id]
    assert attach(client, conversation, "more.md", "# More\n\ntext").status_code == 404
    assert client.delete(reverse("chat:attachment", args=[attached.pk])).status_code == 404


def test_the_tenants_own_documents_cannot_be_removed_from_the_chat(
    member: User, handbook: Document
) -> None:
    response = logged_in(member).delete(reverse("chat:attachment", args=[handbook.pk]))
    assert response.status_code == 404
    assert Document.objects.filter(pk=handbook.pk).exists()


def test_a_file_on_a_new_chat_starts_a_conversation_titled_after_it(
    member: User, tenant: Tenant
) -> None:
    response = logged_in(member).post(
        reverse("chat:attachment_new_chat"),
        {"file": SimpleUploadedFile("falcon_budget-2026.md", NOTES.encode())},
    )
    assert response.status_code == 202
    body = response.json()
    session = ChatSession.objects.get(pk=body["session"]["id"])
    assert (session.user, session.tenant, session.title) == (member, tenant, "falcon budget 2026")
    assert Document.objects.get(pk=body["document"]["id"].removeprefix("doc-")).session == session


def test_a_refused_file_on_a_new_chat_leaves_no_conversation(member: User) -> None:
    response = logged_in(member).post(
        reverse("chat:attachment_new_chat"), {"file": SimpleUploadedFile("x.pdf", b"not a pdf")}
    )
    assert response.status_code == 415
    assert not ChatSession.objects.exists()


def test_documents_endpoints_say_which_methods_they_take(
    member: User, conversation: ChatSession, attached: Document
) -> None:
    client = logged_in(member)
    response = client.get(reverse("chat:attachment", args=[attached.pk]))
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert client.put(reverse("chat:session_documents", args=[conversation.id])).status_code == 405


# --- the page ----------------------------------------------------------------------------------


def test_an_empty_chat_says_how_many_documents_answer(
    member: User, tenant: Tenant, handbook: Document, upload: Upload
) -> None:
    upload(tenant, "travel.md", "# Travel\n\nTrains in second class.")
    upload(tenant, "queued.md", "# Queued\n\nNot yet.", index=False)  # not ready: not counted
    page = logged_in(member).get("/")
    assert "Answers come from Acme’s documents: 2 documents." in page.content.decode()


def test_an_empty_chat_says_nothing_of_documents_without_any(member: User) -> None:
    page = logged_in(member).get("/")
    assert "Answers come from" not in page.content.decode()


def test_a_conversation_page_carries_its_attachments(
    member: User, conversation: ChatSession, attached: Document
) -> None:
    page = logged_in(member).get(reverse("chat:conversation", args=[conversation.id]))
    content = page.content.decode()
    start = content.index('<script id="chat-data" type="application/json">')
    data = json.loads(content[start:].split(">", 1)[1].split("</script>", 1)[0])
    assert [d["id"] for d in data["attachments"]] == [attached.public_id]
    assert data["attachments"][0]["status"] == "ready"
    assert data["knowledge"] == {"on": True, "documents": 0}


def test_a_snapshots_sources_open_for_a_colleague_but_not_an_attachments(
    member: User,
    owner: User,
    conversation: ChatSession,
    handbook: Document,
    attached: Document,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue #31: a shared snapshot's citations could not be opened.
    from chat.models import Message
    from chat.services.branches import branch_data
    from sharing import services as sharing_services

    question = Message.objects.create(session=conversation, role="user", content="Hotel cap?")
    Message.objects.create(
        session=conversation, parent=question, role="assistant", content="EUR 180 [1]."
    )
    hotel, notes = first_chunk(handbook), first_chunk(attached)
    real = branch_data

    def with_sources(*, session: ChatSession) -> list[dict[str, Any]]:
        branch = real(session=session)
        branch[-1]["sources"] = [
            {"number": 1, "title": "Handbook", "where": "Travel", "cited": True,
             "document_id": handbook.public_id, "passage_id": hotel.pk},
            {"number": 2, "title": "Falcon", "where": "", "cited": False,
             "document_id": attached.public_id, "passage_id": notes.pk},
        ]  # fmt: skip
        return branch

    monkeypatch.setattr(sharing_services, "branch_data", with_sources)
    created = logged_in(member).post(reverse("sharing:share_create", args=[conversation.id]))
    page = logged_in(owner).get(created.json()["share"]["url"]).content.decode()

    assert page.count('class="btn shared-open"') == 1  # the handbook's, not the attachment's
    assert f'data-url="{passage_url(hotel)}"' in page
    assert passage_url(notes) not in page
    assert 'id="passage-dialog"' in page
    assert logged_in(owner).get(passage_url(hotel)).status_code == 200
