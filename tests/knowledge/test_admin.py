"""Company knowledge in the admin: uploading several files at once, the documents list with its
progress, a document's page (its file, a new version, another indexing run, its passages),
deletion through the service, the knowledge settings on the tenant's page; and the lanes:
a tenant admin of globex never reaches acme's documents, and nobody reaches an attachment."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from pytest_django import Settings

from chat.models import ChatSession
from knowledge import ingest, services
from knowledge.models import Chunk, Document, DocumentFile, KnowledgeBase
from tenants.models import Tenant
from tests.knowledge.conftest import Upload, corpus_file

pytestmark = pytest.mark.django_db

UPLOAD = "admin:knowledge_document_upload"
CHANGELIST = "admin:knowledge_document_changelist"

HOTELS = """# Travel policy

## Hotels

The hotel cap per night is EUR 180 in Class A cities and EUR 140 elsewhere.

## Trains

Trains over four hours may be booked in first class.
"""


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def doc_url(view: str, document: Document) -> str:
    return reverse(f"admin:knowledge_document_{view}", args=[document.pk])


def files(*names_and_bytes: tuple[str, bytes]) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, data) for name, data in names_and_bytes]


def upload_files(
    client: Client, tenant: Tenant, *names_and_bytes: tuple[str, bytes], **extra: str
) -> Any:
    """Post the upload page's form and follow it to the page that shows the results."""
    data: dict[str, Any] = {"tenant": tenant.pk, "documents": files(*names_and_bytes), **extra}
    return client.post(reverse(UPLOAD), data, follow=True)


def results(response: Any) -> list[tuple[str, bool, str]]:
    return [(r.filename, r.accepted, r.message) for r in response.context["results"]]


# --- uploading -------------------------------------------------------------------------------


def test_a_superuser_uploads_several_files_at_once_and_a_refused_one_says_why(
    admin_client: Client, tenant: Tenant, no_dispatch: list[tuple[object, int]]
) -> None:
    response = upload_files(
        admin_client,
        tenant,
        ("travel-policy.md", corpus_file("acme/travel-policy.md")),
        ("expenses.pdf", corpus_file("acme/expenses.pdf")),
        ("png-named.pdf", corpus_file("bad/png-named.pdf")),
    )
    assert response.redirect_chain == [(f"{reverse(UPLOAD)}?tenant={tenant.pk}", 302)]
    assert results(response) == [
        ("travel-policy.md", True, "Queued for indexing."),
        ("expenses.pdf", True, "Queued for indexing."),
        ("png-named.pdf", False, "The file is named .pdf but is a PNG image."),
    ]
    page = response.content.decode()
    assert "2 of 3 file(s) accepted" in page
    assert "<strong>Refused</strong>: The file is named .pdf but is a PNG image." in page
    documents = Document.objects.order_by("filename")
    assert [d.filename for d in documents] == ["expenses.pdf", "travel-policy.md"]
    assert {d.status for d in documents} == {Document.Status.QUEUED}
    assert {d.tenant for d in documents} == {tenant}
    assert sorted(no_dispatch) == sorted((d.pk, 1) for d in documents)  # queued for indexing
    assert DocumentFile.objects.count() == 2  # nothing of the refused file was kept
    assert LogEntry.objects.filter(action_flag=ADDITION).count() == 2
    # The results are shown once: reloading the page sends nothing and shows nothing.
    again = admin_client.get(f"{reverse(UPLOAD)}?tenant={tenant.pk}")
    assert again.context["results"] == []
    assert Document.objects.count() == 2


def test_a_tenant_admin_uploads_to_their_own_tenant_and_a_duplicate_is_refused(
    tenant_admin: User, tenant: Tenant, other_tenant: Tenant, upload: Upload
) -> None:
    upload(tenant, "travel-policy.md", HOTELS, index=False)
    client = client_for(tenant_admin)
    form = client.get(reverse(UPLOAD)).context["form"]
    assert list(form.fields["tenant"].queryset) == [tenant]  # globex is not offered
    response = upload_files(
        client,
        tenant,
        ("hotels.md", HOTELS.encode()),  # the same bytes under another name
        ("onboarding.md", corpus_file("acme/onboarding.md")),
    )
    (dup_name, dup_ok, dup_why), (new_name, new_ok, _) = results(response)
    assert (dup_name, dup_ok, new_name, new_ok) == ("hotels.md", False, "onboarding.md", True)
    assert dup_why.startswith("This file is already uploaded as “travel policy”")
    onboarding = Document.objects.get(filename="onboarding.md")
    assert onboarding.uploaded_by == tenant_admin
    assert Document.objects.filter(tenant=tenant).count() == 2


def test_a_tenant_admin_cannot_upload_to_another_tenant(
    tenant_admin: User, other_tenant: Tenant
) -> None:
    response = upload_files(
        client_for(tenant_admin), other_tenant, ("notes.md", b"# Notes\n\nhello\n")
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not Document.objects.exists()


def test_the_upload_page_states_the_limits_and_each_tenants_storage(
    admin_client: Client, tenant: Tenant, settings: Settings, upload: Upload
) -> None:
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 7
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 40
    KnowledgeBase.objects.create(tenant=tenant, storage_limit_mb=2)
    upload(tenant, "travel-policy.md", HOTELS, index=False)
    page = admin_client.get(reverse(UPLOAD)).content.decode()
    assert "One file may be at most <strong>7 MB</strong>" in page
    assert "at most\n<strong>40 files</strong>" in page
    assert f"{len(HOTELS.encode())} bytes of 2.0 MB (0%)" in page
    assert "1 document(s): 1 queued" in page
    assert 'type="file" name="documents"' in page
    assert " multiple" in page  # one input, several files
    assert 'data-qa-max-files="40"' in page


def test_what_would_pass_the_storage_limit_is_refused_and_the_rest_goes_in(
    admin_client: Client, tenant: Tenant
) -> None:
    KnowledgeBase.objects.create(tenant=tenant, storage_limit_mb=1)
    big = ("# Notes\n\n" + "words that fill the page " * 25_000).encode()  # 0.6 MB
    response = upload_files(
        admin_client, tenant, ("first.md", big), ("second.md", big.replace(b"Notes", b"More"))
    )
    (_, first_ok, _), (_, second_ok, why) = results(response)
    assert first_ok
    assert not second_ok
    assert "would exceed its limit of 1.0 MB" in why
    assert list(Document.objects.values_list("filename", flat=True)) == ["first.md"]


def test_a_file_over_the_size_limit_is_refused_with_the_limit(
    admin_client: Client, tenant: Tenant, settings: Settings
) -> None:
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 1
    response = upload_files(admin_client, tenant, ("huge.txt", b"a" * (1024 * 1024 + 1)))
    [(_, ok, why)] = results(response)
    assert not ok
    assert why == "The file is 1.0 MB; one file may be at most 1.0 MB."
    assert not Document.objects.exists()


def test_a_title_names_one_file_only(admin_client: Client, tenant: Tenant) -> None:
    response = upload_files(
        admin_client,
        tenant,
        ("a.md", b"# A\n\nalpha\n"),
        ("b.md", b"# B\n\nbeta\n"),
        title="Both",
    )
    assert "A title names one document" in response.content.decode()
    assert not Document.objects.exists()
    upload_files(admin_client, tenant, ("a.md", b"# A\n\nalpha\n"), title="The alpha memo")
    assert Document.objects.get().title == "The alpha memo"


def test_more_files_than_one_upload_may_hold_is_a_400_that_says_so(
    admin_client: Client, tenant: Tenant, settings: Settings
) -> None:
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 3
    names = [(f"n{i}.md", f"# N{i}\n\ntext {i}\n".encode()) for i in range(5)]
    response = admin_client.post(reverse(UPLOAD), {"tenant": tenant.pk, "documents": files(*names)})
    assert response.status_code == 400
    assert "at most 3 at a time" in response.content.decode()
    assert not Document.objects.exists()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("png-named.pdf", "The file is named .pdf but is a PNG image."),
        ("text-named.docx", "The file is named .docx but is not a Word document."),
        ("empty.txt", "The file is empty."),
    ],
)
def test_a_bad_file_is_refused_at_upload_with_its_reason(
    admin_client: Client, tenant: Tenant, name: str, reason: str
) -> None:
    response = upload_files(admin_client, tenant, (name, corpus_file(f"bad/{name}")))
    assert results(response) == [(name, False, reason)]
    assert reason in response.content.decode()
    assert not Document.objects.exists()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("corrupt-truncated.pdf", "The PDF is damaged"),
        ("encrypted.pdf", "encrypted with a password"),
        ("zip-bomb.docx", "zip bomb"),
        ("junk.txt", "not text"),
    ],
)
def test_a_bad_file_that_fails_indexing_shows_its_reason_in_the_list_and_on_its_page(
    admin_client: Client, tenant: Tenant, name: str, reason: str
) -> None:
    upload_files(admin_client, tenant, (name, corpus_file(f"bad/{name}")))
    document = Document.objects.get()
    assert ingest.document_index(document_id=document.pk, version=1) == Document.Status.FAILED
    listed = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Failed" in listed
    assert reason in listed
    page = admin_client.get(doc_url("change", document)).content.decode()
    assert escape(f"Indexing version 1 failed: {Document.objects.get().error}") in page
    assert reason in page


# --- the list --------------------------------------------------------------------------------


def test_the_list_shows_progress_and_reloads_itself_only_while_documents_are_indexing(
    admin_client: Client, tenant: Tenant, upload: Upload
) -> None:
    ready = upload(tenant, "travel-policy.md", HOTELS)
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Ready" in page
    assert "data-qa-busy" not in page
    indexing = upload(tenant, "onboarding.md", corpus_file("acme/onboarding.md"), index=False)
    Document.objects.filter(pk=indexing.pk).update(status=Document.Status.INDEXING, progress=40)
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Indexing 40%" in page
    assert '<progress max="100" value="40">' in page
    assert 'data-qa-busy="1"' in page
    assert f"{ready.chunk_count}</td>" in page  # its passages
    pdf = upload(tenant, "expenses.pdf", corpus_file("acme/expenses.pdf"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert f"{pdf.chunk_count} (3 pages)</td>" in page
    assert "Markdown" in page  # the format, named for people


def test_the_list_filters_by_tenant_status_and_format_and_searches_titles(
    admin_client: Client, tenant: Tenant, other_tenant: Tenant, upload: Upload
) -> None:
    travel = upload(tenant, "travel-policy.md", HOTELS)
    pdf = upload(tenant, "expenses.pdf", corpus_file("acme/expenses.pdf"), index=False)
    merger = upload(other_tenant, "merger.md", corpus_file("globex/confidential-merger.md"))

    def shown(**params: str | int) -> set[object]:
        response = admin_client.get(reverse(CHANGELIST), params)
        assert response.status_code == 200
        return {d.pk for d in response.context["cl"].result_list}

    assert shown() == {travel.pk, pdf.pk, merger.pk}
    assert shown(tenant__id__exact=other_tenant.pk) == {merger.pk}
    assert shown(status__exact="queued") == {pdf.pk}
    assert shown(format="pdf") == {pdf.pk}
    assert shown(q="travel") == {travel.pk}
    assert shown(q="expenses.pdf") == {pdf.pk}


def test_attachments_to_conversations_never_appear_in_the_admin(
    admin_client: Client, tenant: Tenant, member: User, upload: Upload
) -> None:
    session = ChatSession.objects.create(tenant=tenant, user=member)
    attached = upload(
        tenant, "private-notes.md", "# Mine\n\nsecret\n", session_id=session.id, user=member
    )
    assert admin_client.get(reverse(CHANGELIST)).context["cl"].result_count == 0
    for view in ("change", "download", "history", "delete"):
        assert admin_client.get(doc_url(view, attached)).status_code == 404, view
    tenant_page = admin_client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    assert "No documents" in tenant_page.content.decode()  # not counted either


# --- a document's page -----------------------------------------------------------------------


def test_a_documents_page_is_read_only_with_its_file_and_passages(
    admin_client: Client, tenant: Tenant, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    response = admin_client.get(doc_url("change", document))
    page = response.content.decode()
    assert response.context["adminform"].form.fields == {}
    assert 'name="_save"' not in page
    assert "<textarea" not in page  # passages are shown, never edited
    assert "Ready: questions in Acme are answered from its 2 passage(s)." in page
    assert doc_url("download", document) in page
    assert "Travel policy › Hotels" in page
    assert "The hotel cap per night is EUR 180" in page
    assert 'id="replace-form"' in page
    assert 'form="replace-form"' in page
    download = admin_client.get(doc_url("download", document))
    assert download.content == HOTELS.encode()
    assert download["Content-Type"] == "text/markdown; charset=utf-8"
    assert 'attachment; filename="travel-policy.md"' in download["Content-Disposition"]


def test_replacing_the_file_makes_a_new_version_while_the_old_one_answers(
    admin_client: Client, tenant: Tenant, upload: Upload, no_dispatch: list[tuple[object, int]]
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    new = SimpleUploadedFile("travel-policy-2027.md", HOTELS.replace("180", "195").encode())
    response = admin_client.post(doc_url("replace", document), {"file": new}, follow=True)
    assert response.redirect_chain == [(doc_url("change", document), 302)]
    page = response.content.decode()
    assert "Version 2 is queued for indexing; version 1 answers questions until it is ready." in (
        page
    )
    document.refresh_from_db()
    assert (document.version, document.status) == (2, Document.Status.QUEUED)
    assert document.filename == "travel-policy-2027.md"
    assert (document.pk, 2) in no_dispatch
    assert set(Chunk.objects.filter(document=document).values_list("version", flat=True)) == {1}
    listed = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Queued · version 1 answers meanwhile" in listed
    entry = LogEntry.objects.get(object_id=str(document.pk), action_flag=2)
    assert "version 1 → 2" in entry.get_change_message()

    ingest.document_index(document_id=document.pk, version=2)
    page = admin_client.get(doc_url("change", document)).content.decode()
    assert "EUR 195" in page
    assert "EUR 180" not in page


def test_a_refused_replacement_leaves_the_document_as_it_was(
    admin_client: Client, tenant: Tenant, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    bad = SimpleUploadedFile("travel.pdf", corpus_file("bad/png-named.pdf"))
    response = admin_client.post(doc_url("replace", document), {"file": bad}, follow=True)
    assert "Nothing replaced: The file is named .pdf but is a PNG image." in (
        response.content.decode()
    )
    document.refresh_from_db()
    assert (document.version, document.status) == (1, Document.Status.READY)
    assert services.document_data(document=document) == HOTELS.encode()


def test_index_again_queues_a_failed_document(
    admin_client: Client, tenant: Tenant, upload: Upload, no_dispatch: list[tuple[object, int]]
) -> None:
    document = upload(tenant, "encrypted.pdf", corpus_file("bad/encrypted.pdf"))
    assert document.status == Document.Status.FAILED
    no_dispatch.clear()
    response = admin_client.post(doc_url("reindex", document), follow=True)
    assert "Queued 1 document(s) to index again." in response.content.decode()
    document.refresh_from_db()
    assert (document.status, document.error) == (Document.Status.QUEUED, "")
    assert no_dispatch == [(document.pk, 1)]
    # Once queued it is not queued twice.
    response = admin_client.post(doc_url("reindex", document), follow=True)
    assert "already queued or being indexed" in response.content.decode()
    assert len(no_dispatch) == 1


def test_deleting_a_document_removes_its_passages_through_the_service(
    admin_client: Client, tenant: Tenant, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    before = KnowledgeBase.objects.get(tenant=tenant).index_version
    confirm = admin_client.get(doc_url("delete", document)).content.decode()
    assert "its 2 passage(s) and their search entries" in confirm
    response = admin_client.post(doc_url("delete", document), {"post": "yes"})
    assert response.status_code == 302
    assert not Document.objects.exists()
    assert not Chunk.objects.exists()
    assert not DocumentFile.objects.exists()
    assert KnowledgeBase.objects.get(tenant=tenant).index_version > before  # retrieval reloads


def test_a_tenant_admin_who_deleted_a_document_lands_on_the_documents_list(
    tenant_admin: User, tenant: Tenant, upload: Upload
) -> None:
    # Issue #31: Django sent them to the admin home (no model-wide change permission).
    document = upload(tenant, "travel-policy.md", HOTELS)
    response = client_for(tenant_admin).post(doc_url("delete", document), {"post": "yes"})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:knowledge_document_changelist")
    assert not Document.objects.exists()


def test_bulk_delete_goes_through_the_service_for_each_document(
    admin_client: Client, tenant: Tenant, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = upload(tenant, "travel-policy.md", HOTELS)
    two = upload(tenant, "onboarding.md", corpus_file("acme/onboarding.md"))
    deleted: list[Any] = []
    real_delete = services.document_delete

    def spy(*, document: Document) -> None:
        deleted.append(document.pk)
        real_delete(document=document)

    monkeypatch.setattr(services, "document_delete", spy)
    selected = {"action": "delete_selected", "_selected_action": [one.pk, two.pk]}
    confirm = admin_client.post(reverse(CHANGELIST), selected)
    assert "passage(s) and their search entries" in confirm.content.decode()
    admin_client.post(reverse(CHANGELIST), {**selected, "post": "yes"})
    assert sorted(deleted) == sorted([one.pk, two.pk])
    assert not Chunk.objects.exists()


# --- the lanes -------------------------------------------------------------------------------


@pytest.fixture
def acme_document(tenant: Tenant, upload: Upload) -> Document:
    return upload(tenant, "travel-policy.md", HOTELS)


def test_a_tenant_admin_of_another_tenant_finds_none_of_acmes_documents(
    other_admin: User, other_tenant: Tenant, tenant: Tenant, acme_document: Document
) -> None:
    client = client_for(other_admin)
    listed = client.get(reverse(CHANGELIST))
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 0
    assert "acme" not in listed.content.decode().lower()
    assert client.get(reverse(CHANGELIST), {"tenant__id__exact": tenant.pk}).status_code == 404
    assert client.get(reverse(CHANGELIST), {"tenant__id__exact": 987654}).status_code == 404
    assert client.get(reverse(CHANGELIST), {"tenant__id__exact": other_tenant.pk}).status_code == (
        200
    )
    for view in ("change", "download", "history", "delete"):
        response = client.get(doc_url(view, acme_document))
        assert response.status_code == 404, view
        assert "Travel policy" not in response.content.decode()
    new = SimpleUploadedFile("evil.md", b"# Evil\n\nnew text\n")
    assert client.post(doc_url("replace", acme_document), {"file": new}).status_code == 404
    assert client.post(doc_url("reindex", acme_document)).status_code == 404
    assert client.post(doc_url("delete", acme_document), {"post": "yes"}).status_code == 404
    client.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [acme_document.pk], "post": "yes"},
    )
    acme_document.refresh_from_db()
    assert (acme_document.version, acme_document.status) == (1, Document.Status.READY)
    assert Chunk.objects.filter(document=acme_document).count() == 2


def test_a_tenant_admin_runs_their_own_tenants_documents(
    tenant_admin: User, acme_document: Document, no_dispatch: list[tuple[object, int]]
) -> None:
    client = client_for(tenant_admin)
    assert client.get(reverse(CHANGELIST)).context["cl"].result_count == 1
    page = client.get(doc_url("change", acme_document)).content.decode()
    assert 'id="replace-form"' in page
    assert "Index again" in page
    new = SimpleUploadedFile("travel.md", HOTELS.replace("180", "200").encode())
    client.post(doc_url("replace", acme_document), {"file": new})
    acme_document.refresh_from_db()
    assert acme_document.version == 2
    client.post(doc_url("delete", acme_document), {"post": "yes"})
    assert not Document.objects.exists()


def test_a_staff_account_that_runs_no_tenant_reaches_no_document(
    member: User, acme_document: Document
) -> None:
    member.is_staff = True
    member.save()
    client = client_for(member)
    assert client.get(reverse(CHANGELIST)).status_code == 403
    assert client.get(reverse(UPLOAD)).status_code == 403
    assert client.get(doc_url("download", acme_document)).status_code == 404


def test_uploads_are_in_the_admin_history_of_their_tenant_only(
    tenant_admin: User,
    other_admin: User,
    tenant: Tenant,
    other_tenant: Tenant,
) -> None:
    upload_files(client_for(tenant_admin), tenant, ("a.md", b"# A\n\nalpha\n"))
    upload_files(client_for(other_admin), other_tenant, ("b.md", b"# B\n\nbeta\n"))
    history = reverse("admin:admin_logentry_changelist")
    ours = client_for(tenant_admin).get(history).context["cl"].result_list
    assert [e.object_repr for e in ours] == ["a"]
    theirs = client_for(other_admin).get(history).context["cl"].result_list
    assert [e.object_repr for e in theirs] == ["b"]


# --- knowledge settings on the tenant's page -------------------------------------------------


def tenant_form(tenant: Tenant, **knowledge: object) -> dict[str, object]:
    kb = KnowledgeBase.objects.filter(tenant=tenant).first()
    data: dict[str, object] = {
        "name": tenant.name,
        "slug": tenant.slug,
        "priority": tenant.priority,
        "system_prompt": tenant.system_prompt,
        "active": "on",
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "group_mappings-TOTAL_FORMS": 0,  # single sign-on's group mappings (superusers)
        "group_mappings-INITIAL_FORMS": 0,
        "knowledge_base-TOTAL_FORMS": 1,
        "knowledge_base-INITIAL_FORMS": 1 if kb else 0,
        "knowledge_base-0-id": kb.pk if kb else "",
        "knowledge_base-0-tenant": tenant.pk,
        "knowledge_base-0-mode": KnowledgeBase.Mode.FIRST,
        "knowledge_base-0-storage_limit_mb": "",
        "prompt_suggestions-TOTAL_FORMS": 0,  # the suggestions inline
        "prompt_suggestions-INITIAL_FORMS": 0,
    }
    data.update({f"knowledge_base-0-{name}": value for name, value in knowledge.items()})
    return data


def tenant_url(tenant: Tenant) -> str:
    return reverse("admin:tenants_tenant_change", args=[tenant.pk])


def test_the_tenant_page_shows_storage_used_and_document_counts(
    admin_client: Client, tenant: Tenant, upload: Upload
) -> None:
    KnowledgeBase.objects.create(tenant=tenant, storage_limit_mb=10)
    upload(tenant, "travel-policy.md", HOTELS)
    upload(tenant, "encrypted.pdf", corpus_file("bad/encrypted.pdf"))
    page = admin_client.get(tenant_url(tenant)).content.decode()
    used = len(HOTELS.encode()) + len(corpus_file("bad/encrypted.pdf"))
    assert f"{services.human_size(used)} of 10.0 MB (0%)" in page
    assert "2 document(s): 1 ready, 1 failed" in page
    assert f"{reverse(CHANGELIST)}?tenant__id__exact={tenant.pk}" in page
    assert f"{reverse(UPLOAD)}?tenant={tenant.pk}" in page


def test_a_superuser_sets_the_mode_and_the_storage_limit(
    admin_client: Client, tenant: Tenant
) -> None:
    response = admin_client.post(
        tenant_url(tenant), tenant_form(tenant, mode="documents_only", storage_limit_mb=50)
    )
    assert response.status_code == 302
    kb = KnowledgeBase.objects.get(tenant=tenant)
    assert (kb.mode, kb.storage_limit_mb) == ("documents_only", 50)
    entry = LogEntry.objects.get(object_id=str(tenant.pk))
    assert "knowledge settings" in entry.get_change_message()


def test_a_tenant_admin_changes_the_mode_but_not_the_storage_limit(
    tenant_admin: User, tenant: Tenant
) -> None:
    KnowledgeBase.objects.create(tenant=tenant, storage_limit_mb=20)
    client = client_for(tenant_admin)
    page = client.get(tenant_url(tenant))
    [formset] = [
        f for f in page.context["inline_admin_formsets"] if f.formset.model is KnowledgeBase
    ]
    assert "storage_limit_mb" not in formset.formset.forms[0].fields
    assert "Only superusers change the storage limit." in page.content.decode()
    response = client.post(
        tenant_url(tenant), tenant_form(tenant, mode="off", storage_limit_mb=100000)
    )
    assert response.status_code == 302
    kb = KnowledgeBase.objects.get(tenant=tenant)
    assert (kb.mode, kb.storage_limit_mb) == ("off", 20)


def test_a_tenant_admin_sets_the_mode_of_a_tenant_that_had_no_settings_yet(
    tenant_admin: User, tenant: Tenant
) -> None:
    response = client_for(tenant_admin).post(tenant_url(tenant), tenant_form(tenant, mode="off"))
    assert response.status_code == 302
    assert KnowledgeBase.objects.get(tenant=tenant).mode == "off"


def test_the_index_lists_documents_under_knowledge(tenant_admin: User) -> None:
    index = client_for(tenant_admin).get(reverse("admin:index"))
    [knowledge] = [s for s in index.context["app_list"] if s["app_label"] == "knowledge"]
    assert knowledge["models"][0]["name"] == "Documents"
    add = client_for(tenant_admin).get(reverse("admin:knowledge_document_add"))
    assert (add.status_code, add["Location"]) == (302, reverse(UPLOAD))  # the index's "Add"
    upload_link = client_for(tenant_admin).get(reverse(CHANGELIST)).content.decode()
    assert reverse(UPLOAD) in upload_link
    assert "Files people attach to their own conversations" in upload_link
