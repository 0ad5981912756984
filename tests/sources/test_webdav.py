"""A WebDAV source against a real WebDAV server (wsgidav on cheroot, 127.0.0.1)."""

from __future__ import annotations

import time

import pytest

from knowledge.models import Chunk, Document
from sources.models import Source, SourceItem, SourceRun
from tests.sources.conftest import make_source, titles

pytestmark = pytest.mark.django_db


@pytest.fixture
def files(dav):
    (dav.root / "travel").mkdir()
    (dav.root / "travel" / "hotels.md").write_text("# Hotels\n\nAt most EUR 180 a night.\n")
    (dav.root / "leave.md").write_text("# Leave\n\n28 days a year.\n")
    (dav.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return dav


def webdav(tenant, dav, **fields):
    return make_source(tenant, Source.Kind.WEBDAV, dav.url, username=dav.user,
                       password=fields.pop("password", dav.password), delay_seconds=0,
                       **fields)  # fmt: skip


def test_a_webdav_folder_is_synced_with_its_subfolders(tenant, files, syncer):
    run = syncer(webdav(tenant, files))
    assert run.status == SourceRun.Status.DONE, run.error
    assert titles(tenant) == ["Hotels", "Leave"]
    assert Document.objects.get(title="Hotels").origin == f"{files.url}travel/hotels.md"


def test_a_webdav_resync_reads_no_content_then_follows_changes_and_deletions(tenant, files, syncer):
    source = webdav(tenant, files)
    syncer(source)
    run = syncer(source)
    assert (run.unchanged, run.added, run.changed, run.removed, run.bytes_read) == (2, 0, 0, 0, 0)
    time.sleep(1.1)  # Last-Modified and the ETag move with the second
    (files.root / "travel" / "hotels.md").write_text("# Hotels\n\nAt most EUR 210 a night.\n")
    (files.root / "leave.md").unlink()
    run = syncer(source)
    assert (run.changed, run.removed) == (1, 1)
    assert "EUR 210" in Chunk.objects.get(document__title="Hotels").text
    assert titles(tenant) == ["Hotels"]


def test_wrong_credentials_fail_the_source_with_its_reason(tenant, files, syncer):
    run = syncer(webdav(tenant, files, password="wrong"))
    assert run.status == SourceRun.Status.FAILED
    assert "401" in run.error
    assert not Document.objects.exists()


def test_a_ten_gigabyte_file_is_refused_from_its_listed_size(tenant, files, syncer):
    with open(files.root / "archive.txt", "wb") as handle:
        handle.truncate(10 * 1024**3)  # sparse: takes no disk
    run = syncer(webdav(tenant, files))
    assert run.added == 2
    assert run.failed == 1
    assert run.bytes_read < 1024 * 1024
    assert "10.0 GB" in SourceItem.objects.get(key="archive.txt").error


def test_the_password_is_kept_sealed(tenant, files):
    source = webdav(tenant, files)
    source.refresh_from_db()
    assert source.secret
    assert files.password not in source.secret
