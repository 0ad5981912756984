"""Sources in the admin: added by a tenant admin, synced on demand, their status and failures
shown, their password written and never shown again, another tenant's a 404."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from sources import services, sync
from sources.models import Source
from tests.sources.conftest import index_queued, make_source

pytestmark = pytest.mark.django_db


def admin_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(tenant, share: Path, **extra) -> dict[str, object]:
    return {
        "tenant": tenant.pk,
        "name": "Handbook share",
        "kind": "folder",
        "location": str(share),
        "username": "",
        "password": "",
        "interval_minutes": 60,
        "max_documents": 100,
        "max_total_mb": 50,
        "delay_seconds": 0.5,
        "concurrency": 1,
        "enabled": "on",
        **extra,
    }


def test_a_tenant_admin_adds_a_folder_source_and_watches_it_sync(
    tenant, tenant_admin, share, sync_dispatches, document_dispatches
):
    (share / "hotels.md").write_text("# Hotels\n\nAt most EUR 180 a night.\n")
    client = admin_for(tenant_admin)
    response = client.post(reverse("admin:sources_source_add"), form(tenant, share))
    assert response.status_code == 302, response.content.decode()[:2000]
    source = Source.objects.get(name="Handbook share")
    assert len(sync_dispatches) == 1  # its first sync is queued at once
    page = client.get(reverse("admin:sources_source_change", args=[source.pk])).content.decode()
    assert "Syncing since" in page
    assert 'data-qa-busy="1"' in page
    assert sync.run_slice(run_id=sync_dispatches[0]) == "done"
    index_queued(document_dispatches)
    page = client.get(reverse("admin:sources_source_change", args=[source.pk])).content.decode()
    assert "1 added" in page
    assert "1 document(s): 1 ready" in page
    assert "Hotels" in page


def test_a_folder_outside_the_allowed_ones_is_a_form_error(tenant, tenant_admin, share, tmp_path):
    response = admin_for(tenant_admin).post(
        reverse("admin:sources_source_add"), form(tenant, tmp_path)
    )
    assert response.status_code == 200
    assert "outside the folders this server may sync" in response.content.decode()
    assert not Source.objects.exists()


def test_the_password_is_written_never_shown_and_kept_when_left_empty(
    tenant, tenant_admin, sync_dispatches
):
    source = make_source(tenant, Source.Kind.WEBDAV, "http://127.0.0.1:9/dav/", username="u",
                         password="hunter2-secret")  # fmt: skip
    client = admin_for(tenant_admin)
    url = reverse("admin:sources_source_change", args=[source.pk])
    page = client.get(url).content.decode()
    assert "hunter2-secret" not in page
    assert source.secret not in page
    data = {
        "name": source.name,
        "kind": "webdav",
        "location": source.location,
        "username": "u",
        "password": "",
        "interval_minutes": 60,
        "max_documents": 100,
        "max_total_mb": 50,
        "delay_seconds": 0,
        "concurrency": 1,
        "enabled": "on",
    }
    assert client.post(url, data).status_code == 302
    source.refresh_from_db()
    assert services.source_password(source=source) == "hunter2-secret"
    assert client.post(url, {**data, "forget_password": "on"}).status_code == 302
    source.refresh_from_db()
    assert services.source_password(source=source) is None


def test_sync_now_starts_a_run_and_another_tenants_admin_gets_a_404(
    tenant, tenant_admin, other_admin, share, sync_dispatches
):
    source = make_source(tenant, Source.Kind.FOLDER, str(share))
    sync.run_slice(run_id=sync_dispatches.pop())
    client = admin_for(tenant_admin)
    assert client.post(reverse("admin:sources_source_sync", args=[source.pk])).status_code == 302
    assert len(sync_dispatches) == 1
    other = admin_for(other_admin)
    assert other.get(reverse("admin:sources_source_change", args=[source.pk])).status_code in (
        302,
        404,
    )
    assert other.post(reverse("admin:sources_source_sync", args=[source.pk])).status_code == 404
    assert len(sync_dispatches) == 1
