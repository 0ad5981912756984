"""Documents through the pipeline: upload, index, replace, delete, fail; limits and duplicates;
retrieval fused from full text and vectors, always within one tenant's scope."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from pytest_django import Settings

from chat.models import ChatSession, Message
from knowledge import ingest, services
from knowledge.index import fulltext_search, vector_search
from knowledge.models import Chunk, Document, Passage
from knowledge.retrieval import fuse, retrieve
from tenants.models import Tenant
from tests.fakes import FakeEmbedder
from tests.knowledge.conftest import Upload, corpus_file

pytestmark = pytest.mark.django_db

HOTELS = """# Travel policy

## Hotels

The hotel cap per night is EUR 180 in Class A cities and EUR 140 elsewhere.

## Trains

Trains over four hours may be booked in first class.
"""


def titles(found: list[object]) -> list[str]:
    return [f.chunk.headings for f in found]  # type: ignore[attr-defined]


def fts_rows(chunk_ids: list[int]) -> int:
    """Rows of the full-text index standing for these chunks."""
    if not chunk_ids:
        return 0
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM knowledge_chunk"
                " WHERE id = ANY(%s) AND search_tsv IS NOT NULL",
                [chunk_ids],
            )
        else:
            marks = ",".join("%s" for _ in chunk_ids)
            cursor.execute(
                f"SELECT count(*) FROM knowledge_chunk_fts WHERE rowid IN ({marks})",  # noqa: S608
                chunk_ids,
            )
        return int(cursor.fetchone()[0])


def test_an_uploaded_document_is_indexed_into_passages_with_their_sections(
    tenant: Tenant, upload: Upload, fake_embedder: FakeEmbedder
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    assert document.status == Document.Status.READY
    assert document.progress == 100
    assert document.kind == "markdown"
    chunks = list(document.chunks.order_by("ordinal"))
    assert [c.headings for c in chunks] == ["Travel policy › Hotels", "Travel policy › Trains"]
    assert document.chunk_count == 2
    assert ("passage", 2) in fake_embedder.calls
    assert fts_rows([c.pk for c in chunks]) == 2


def test_the_handbook_indexes_every_format(tenant: Tenant, upload: Upload) -> None:
    names = [
        "expenses.pdf",
        "it-security.html",
        "leave-policy.docx",
        "office-guide-shanghai.txt",
        "onboarding.md",
        "员工手册-福利.md",
    ]
    for name in names:
        document = upload(tenant, name, corpus_file(f"acme/{name}"))
        assert document.status == Document.Status.READY, (name, document.error)
        assert document.chunk_count > 0
    pdf = Document.objects.get(filename="expenses.pdf")
    assert pdf.pages == 3
    assert {c.page for c in pdf.chunks.all()} == {1, 2, 3}


def test_full_text_and_vectors_both_find_a_passage_and_fusion_ranks_it_first(
    tenant: Tenant, upload: Upload
) -> None:
    upload(tenant, "travel-policy.md", HOTELS)
    hotels = Chunk.objects.get(headings__endswith="Hotels")
    words = ["hotel", "cap"]
    assert fulltext_search(tenant_id=tenant.pk, session_id=None, words=words, limit=5)[0][0] == (
        hotels.pk
    )
    result = retrieve(tenant_id=tenant.pk, session_id=None, question="What is the hotel cap?")
    assert result.found[0].chunk == hotels
    assert result.answerable


def test_reciprocal_rank_fusion_prefers_what_several_searches_agree_on() -> None:
    scores = fuse([[1, 2, 3], [3, 1], [3]])
    assert max(scores, key=scores.__getitem__) == 3
    assert scores[1] > scores[2]


def test_a_follow_up_is_searched_with_the_question_before_it(
    tenant: Tenant, upload: Upload
) -> None:
    upload(tenant, "travel-policy.md", HOTELS)
    result = retrieve(
        tenant_id=tenant.pk,
        session_id=None,
        question="And elsewhere?",
        earlier=["What is the hotel cap per night?"],
    )
    assert result.found[0].chunk.headings.endswith("Hotels")


def test_another_tenant_never_retrieves_a_document(
    tenant: Tenant, other_tenant: Tenant, upload: Upload
) -> None:
    upload(other_tenant, "merger.md", "# Project Falcon\n\nThe price is USD 412.5 million.\n")
    upload(tenant, "travel-policy.md", HOTELS)
    result = retrieve(
        tenant_id=tenant.pk, session_id=None, question="What is Project Falcon's price?"
    )
    assert all(f.chunk.tenant_id == tenant.pk for f in result.found)
    assert services.searchable(tenant=other_tenant, session_id=None)  # it has one
    hits = vector_search(
        tenant_id=tenant.pk,
        session_id=None,
        vector=FakeEmbedder().embed_queries(["Project Falcon price"])[0],
        embedder=FakeEmbedder.name,
        limit=10,
    )
    assert {Chunk.objects.get(pk=h.chunk_id).tenant_id for h in hits} <= {tenant.pk}


def test_an_attached_document_is_searched_only_in_its_conversation(
    tenant: Tenant, member: User, upload: Upload
) -> None:
    mine = ChatSession.objects.create(tenant=tenant, user=member)
    other = ChatSession.objects.create(tenant=tenant, user=member)
    notes = "# Notes\n\nThe kiwi budget is 77 coins.\n"
    upload(tenant, "notes.md", notes, session_id=mine.id, user=member)
    question = "What is the kiwi budget?"
    assert retrieve(tenant_id=tenant.pk, session_id=mine.id, question=question).found
    assert not retrieve(tenant_id=tenant.pk, session_id=other.id, question=question).found
    assert not retrieve(tenant_id=tenant.pk, session_id=None, question=question).found
    assert not services.tenant_documents(tenant=tenant).exists()
    mine.delete()
    assert not Document.objects.filter(filename="notes.md").exists()


def test_a_replaced_document_answers_from_its_old_version_until_the_new_one_is_ready(
    tenant: Tenant, upload: Upload, no_dispatch: list[tuple[object, int]]
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    new_text = HOTELS.replace("EUR 180", "EUR 195")
    document = services.document_replace(
        document=document, upload=services.Upload("travel-policy.md", new_text.encode())
    )
    assert document.version == 2
    assert document.status == Document.Status.QUEUED
    found = retrieve(tenant_id=tenant.pk, session_id=None, question="hotel cap per night").found
    assert "EUR 180" in found[0].chunk.text  # the old version still answers
    ingest.document_index(document_id=document.pk, version=2)
    found = retrieve(tenant_id=tenant.pk, session_id=None, question="hotel cap per night").found
    assert "EUR 195" in found[0].chunk.text
    assert set(Chunk.objects.filter(document=document).values_list("version", flat=True)) == {2}


def test_indexing_an_outdated_version_changes_nothing(tenant: Tenant, upload: Upload) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS, index=False)
    document = services.document_replace(
        document=document, upload=services.Upload("travel-policy.md", b"# New\n\nnew text\n")
    )
    assert ingest.document_index(document_id=document.pk, version=1) == "stale"
    assert not Chunk.objects.exists()


def test_a_deleted_document_leaves_no_text_vectors_or_index_entries(
    tenant: Tenant, member: User, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    chunk_ids = list(document.chunks.values_list("id", flat=True))
    session = ChatSession.objects.create(tenant=tenant, user=member)
    question = Message.objects.create(session=session, role="user", content="cap?")
    Passage.objects.create(
        message=question, number=1, chunk_id=chunk_ids[0], document=document, title="Travel"
    )
    services.document_delete(document=document)
    assert not Chunk.objects.filter(id__in=chunk_ids).exists()
    assert fts_rows(chunk_ids) == 0
    passage = Passage.objects.get()
    assert passage.chunk is None
    assert passage.document is None
    assert passage.title == "Travel"
    assert not retrieve(tenant_id=tenant.pk, session_id=None, question="hotel cap").found


def test_a_file_that_cannot_be_read_fails_with_its_reason_and_others_go_on(
    tenant: Tenant, upload: Upload
) -> None:
    bad = upload(tenant, "scan.pdf", b"%PDF-1.4\n%garbage without objects\n")
    good = upload(tenant, "travel-policy.md", HOTELS)
    assert bad.status == Document.Status.FAILED
    assert bad.error == "The PDF is damaged and cannot be read."
    assert good.status == Document.Status.READY


def test_an_unexpected_error_fails_the_document_without_a_traceback_in_it(
    tenant: Tenant, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ingest, "_store", broken)
    document = upload(tenant, "travel-policy.md", HOTELS)
    assert document.status == Document.Status.FAILED
    assert document.error == "Indexing failed unexpectedly; the error was logged."
    assert not Chunk.objects.exists()


@pytest.mark.parametrize(
    ("filename", "data", "code"),
    [
        ("photo.pdf", b"\x89PNG\r\n\x1a\n" + b"0" * 20, "unsupported_file"),
        ("empty.txt", b"", "unsupported_file"),
        ("noname", b"", "unsupported_file"),
        ("", b"text", "invalid_file"),
    ],
)
def test_bad_uploads_are_refused_before_anything_is_stored(
    tenant: Tenant, no_dispatch: list[tuple[object, int]], filename: str, data: bytes, code: str
) -> None:
    with pytest.raises(services.KnowledgeError) as refused:
        services.document_upload(tenant=tenant, upload=services.Upload(filename, data))
    assert refused.value.code == code
    assert not Document.objects.exists()
    assert not no_dispatch


def test_size_storage_and_duplicate_limits(
    tenant: Tenant, member: User, upload: Upload, settings: Settings
) -> None:
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 1
    with pytest.raises(services.KnowledgeError) as too_big:
        services.document_upload(
            tenant=tenant, upload=services.Upload("big.txt", b"a" * (1024 * 1024 + 1))
        )
    assert too_big.value.code == "file_too_large"
    assert too_big.value.status == 413
    kb = services.knowledge_base(tenant=tenant)
    kb.storage_limit_mb = 1
    kb.save()
    upload(tenant, "a.txt", b"a" * 700_000, index=False)
    with pytest.raises(services.KnowledgeError) as full:
        upload(tenant, "b.txt", b"b" * 400_000, index=False)
    assert full.value.code == "storage_limit"
    with pytest.raises(services.KnowledgeError) as twice:
        upload(tenant, "copy.txt", b"a" * 700_000, index=False)
    assert twice.value.code == "duplicate_document"
    settings.QASSIST_ATTACHMENTS_MAX_MB = 1
    session = ChatSession.objects.create(tenant=tenant, user=member)
    upload(tenant, "mine.txt", b"m" * 600_000, index=False, session_id=session.id, user=member)
    with pytest.raises(services.KnowledgeError) as attachments:
        upload(tenant, "more.txt", b"n" * 600_000, index=False, session_id=session.id, user=member)
    assert attachments.value.code == "attachment_limit"


def test_a_document_whose_indexing_could_not_be_queued_is_queued_again_by_beat(
    tenant: Tenant, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowledge import tasks

    document = upload(tenant, "travel-policy.md", HOTELS, index=False)
    sent: list[tuple[object, ...]] = []

    def broker_away(*args: object, **kwargs: object) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.index_document, "apply_async", broker_away)
    tasks._send(document.pk, document.version)  # what the upload's commit runs
    document.refresh_from_db()
    assert document.needs_dispatch
    assert document.status == Document.Status.QUEUED
    monkeypatch.setattr(
        tasks.index_document, "apply_async", lambda args, queue: sent.append((*args, queue))
    )
    assert tasks.dispatch_pending() == 1
    assert sent == [(str(document.pk), 1, "knowledge")]
    document.refresh_from_db()
    assert not document.needs_dispatch


def test_a_tenants_only_document_keeps_answering_while_its_new_version_is_indexed(
    tenant: Tenant, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", HOTELS)
    services.document_replace(
        document=document,
        upload=services.Upload("travel-policy.md", HOTELS.replace("180", "195").encode()),
    )
    # Questions still search: version 1's passages answer until version 2 is ready.
    assert services.searchable(tenant=tenant, session_id=None)


def test_a_tenant_whose_documents_were_never_indexed_has_nothing_to_search(
    tenant: Tenant, upload: Upload
) -> None:
    upload(tenant, "travel-policy.md", HOTELS, index=False)
    upload(tenant, "broken.pdf", corpus_file("bad/corrupt-truncated.pdf"))
    assert not services.searchable(tenant=tenant, session_id=None)


def test_an_attachment_is_indexed_ahead_of_the_knowledge_base(
    tenant: Tenant, member: User, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowledge import tasks

    sent: list[str] = []
    monkeypatch.setattr(tasks.index_document, "apply_async", lambda args, queue: sent.append(queue))
    handbook = upload(tenant, "travel-policy.md", HOTELS, index=False)
    session = ChatSession.objects.create(tenant=tenant, user=member)
    notes = "# Notes\n\nkiwi\n"
    mine = upload(tenant, "notes.md", notes, index=False, session_id=session.id, user=member)
    tasks._send(handbook.pk, 1)
    tasks._send(mine.pk, 1)
    assert sent == ["knowledge", "interactive"]


def test_a_document_that_takes_too_long_fails_with_a_reason(
    tenant: Tenant, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    def slow(*args: object, **kwargs: object) -> None:
        raise SoftTimeLimitExceeded

    monkeypatch.setattr(ingest, "_embed", slow)
    document = upload(tenant, "travel-policy.md", HOTELS)
    assert document.status == Document.Status.FAILED
    assert "longer than 30 minutes" in document.error


def test_many_small_files_at_once_each_end_on_their_own(
    tenant: Tenant, upload: Upload, no_dispatch: list[tuple[object, int]]
) -> None:
    files = [
        (f"note-{i}.md", f"# Note {i}\n\nThe code word of note {i} is kiwi{i}.\n")
        for i in range(300)
    ]
    files[137] = ("note-137.pdf", "not a pdf at all")
    refused: list[str] = []
    for name, text in files:
        try:
            upload(tenant, name, text, index=False)
        except services.KnowledgeError as error:
            refused.append(error.code)
    assert refused == ["unsupported_file"]
    assert len(no_dispatch) == 299
    for document_id, version in no_dispatch:
        ingest.document_index(document_id=document_id, version=version)  # type: ignore[arg-type]
    assert Document.objects.filter(status=Document.Status.READY).count() == 299
    found = retrieve(tenant_id=tenant.pk, session_id=None, question="code word of note 250")
    assert "kiwi250" in found.found[0].chunk.text


class OtherModel(FakeEmbedder):
    """Another embedding model: its vectors are the fake's, reversed (as unrelated to the
    fake's as another model's are)."""

    name = "other-model"

    def _embed(self, texts):
        return super()._embed(texts)[:, ::-1].copy()


def test_vectors_of_another_embedding_model_are_never_compared_with_a_question(
    tenant: Tenant, upload: Upload, settings: Settings
) -> None:
    from knowledge.embeddings import set_embedder
    from knowledge.index import forget_matrices

    document = upload(tenant, "travel-policy.md", HOTELS)
    set_embedder(OtherModel())  # the model changed after the document was indexed
    forget_matrices()
    vector = OtherModel().embed_queries(["hotel cap per night"])[0]
    assert (
        vector_search(
            tenant_id=tenant.pk, session_id=None, vector=vector, embedder="other-model", limit=5
        )
        == []
    )
    # Full text still finds it: the question is answered, from the old passages.
    found = retrieve(tenant_id=tenant.pk, session_id=None, question="hotel cap per night")
    assert [f.chunk.document_id for f in found.found][:1] == [document.pk]
    assert found.best_similarity == 0.0  # no vector of this model says how close it is


def test_reindex_knowledge_queues_the_documents_another_model_embedded(
    tenant: Tenant, other_tenant: Tenant, upload: Upload, no_dispatch: list[tuple[object, int]]
) -> None:
    from io import StringIO

    from django.core.management import call_command

    from knowledge.embeddings import set_embedder
    from knowledge.index import forget_matrices

    old = upload(tenant, "travel-policy.md", HOTELS)
    theirs = upload(other_tenant, "trains.md", "# Trains\n\nFirst class over four hours.\n")
    set_embedder(OtherModel())
    forget_matrices()
    new = upload(tenant, "leave.md", "# Leave\n\nThirty days of paid leave a year.\n")
    no_dispatch.clear()

    out = StringIO()
    call_command("reindex_knowledge", "--tenant", tenant.slug, stdout=out)
    assert "Queued 1 document(s) not embedded by other-model" in out.getvalue()
    assert no_dispatch == [(old.pk, old.version)]  # not the new one, not another tenant's

    ingest.document_index(document_id=old.pk, version=old.version)
    assert set(Chunk.objects.filter(document=old).values_list("embedder", flat=True)) == {
        "other-model"
    }
    vector = OtherModel().embed_queries(["hotel cap per night"])[0]
    hits = vector_search(
        tenant_id=tenant.pk, session_id=None, vector=vector, embedder="other-model", limit=5
    )
    assert Chunk.objects.get(pk=hits[0].chunk_id).document_id == old.pk
    assert new.status == Document.Status.READY

    no_dispatch.clear()
    call_command("reindex_knowledge", stdout=out)  # every tenant: only the other's is left
    assert no_dispatch == [(theirs.pk, theirs.version)]
    no_dispatch.clear()
    call_command("reindex_knowledge", "--all", "--tenant", tenant.slug, stdout=out)
    assert sorted(map(str, (d for d, _ in no_dispatch))) == sorted([str(old.pk), str(new.pk)])


def test_vectors_the_postgresql_index_cannot_hold_fail_the_document_with_a_reason(
    tenant: Tenant, upload: Upload
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the pgvector column exists only in PostgreSQL")
    from knowledge.embeddings import set_embedder

    class Wide(FakeEmbedder):
        name = "wide-model"
        dim = 768

    set_embedder(Wide())
    document = upload(tenant, "travel-policy.md", HOTELS)
    assert document.status == Document.Status.FAILED
    assert "768-dimensional vectors; PostgreSQL's index holds 512" in document.error
    assert not Chunk.objects.filter(document=document).exists()  # nothing half-stored
