"""Company knowledge under test: a fake embedder (word overlap as similarity), documents
indexed at once (the Celery task's pipeline, called directly), the handbook of bench/rag_eval."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from knowledge import ingest, services
from knowledge.embeddings import set_embedder
from knowledge.index import forget_matrices
from knowledge.models import Document
from knowledge.services import document_set_groups
from tenants.models import Membership, Tenant, TenantGroup
from tenants.services import tenant_group_create, tenant_group_set_members
from tests.chat.conftest import engine, use_engine  # noqa: F401 - fixtures for these tests
from tests.fakes import FakeCounter, FakeEmbedder

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "rag_eval" / "data"


@pytest.fixture(autouse=True)
def roomy_context(fake_prompt_counter: FakeCounter) -> None:
    # Passages need room: a model window of 4096 (fake) tokens, as the product's default.
    fake_prompt_counter.runner.max_seq_tokens = 4096


@pytest.fixture(autouse=True)
def fake_embedder(settings: Settings) -> Iterator[FakeEmbedder]:
    embedder = FakeEmbedder()
    set_embedder(embedder)
    forget_matrices()
    # The fake's similarities are word overlaps, lower than a real model's.
    settings.QASSIST_KNOWLEDGE_MIN_SCORE = 0.2
    yield embedder
    set_embedder(None)
    forget_matrices()


@pytest.fixture
def no_dispatch(document_dispatches: list[tuple[object, int]]) -> list[tuple[object, int]]:
    """What uploads queued for indexing (nothing is sent to Celery in tests)."""
    return document_dispatches


Upload = Callable[..., Document]


@pytest.fixture
def upload(no_dispatch: list[tuple[object, int]]) -> Upload:
    """Upload bytes as a document of `tenant` and index them at once."""

    def make(
        tenant: Tenant,
        filename: str,
        data: bytes | str,
        *,
        index: bool = True,
        session_id: object = None,
        user: User | None = None,
    ) -> Document:
        raw = data.encode() if isinstance(data, str) else data
        document = services.document_upload(
            tenant=tenant,
            upload=services.Upload(filename, raw),
            session_id=session_id,  # type: ignore[arg-type]
            uploaded_by=user,
        )
        if index:
            ingest.document_index(document_id=document.pk, version=document.version)
            document.refresh_from_db()
        return document

    return make


def corpus_file(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


# --- who may read what (test_groups.py, test_groups_api.py) -------------------------------------

TRAVEL = "# Travel policy\n\n## Hotels\n\nThe hotel cap per night is EUR 180.\n"
SALARY = "# Salary bands\n\n## Level L3\n\nThe salary band of level L3 is EUR 70,000 to 82,000.\n"


@pytest.fixture
def hr_group(tenant: Tenant) -> TenantGroup:
    return tenant_group_create(tenant=tenant, name="HR")


@pytest.fixture
def hr(tenant: Tenant, hr_group: TenantGroup) -> User:
    user = User.objects.create_user("hr", "hr@example.com", "pw")
    Membership.objects.create(user=user, tenant=tenant)
    tenant_group_set_members(group=hr_group, users=[user])
    return user


@pytest.fixture
def docs(tenant: Tenant, upload: Upload, hr_group: TenantGroup) -> dict[str, Document]:
    travel = upload(tenant, "travel.md", TRAVEL)
    salary = upload(tenant, "salary.md", SALARY)
    document_set_groups(document=salary, groups=[hr_group])
    salary.refresh_from_db()
    return {"travel": travel, "salary": salary}
