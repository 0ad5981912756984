"""A folder source against a real folder: the first sync, incremental re-syncs (nothing read
when nothing changed), changes, deletions with everything they take, and bad folders."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from knowledge.models import Chunk, Document
from sources import services
from sources.models import Source, SourceItem, SourceRun
from tests.sources.conftest import make_source, titles

pytestmark = pytest.mark.django_db

HOTELS = "# Hotels\n\nA hotel night costs at most EUR 180 in Amsterdam.\n"
TRAINS = "Trains\n\nTrains are booked in second class for trips under four hours.\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def handbook(share: Path) -> Path:
    write(share / "travel" / "hotels.md", HOTELS)
    write(share / "travel" / "trains.txt", TRAINS)
    write(share / "welcome.html", "<html><head><title>Welcome</title></head><body><p>Hello "
          "new colleague, the canteen opens at noon.</p></body></html>")  # fmt: skip
    write(share / "photo.png", "not a document")  # a format the parsers do not read: skipped
    write(share / ".hidden.md", "# secret\n")  # hidden files: skipped
    return share


def test_the_first_sync_adds_every_readable_file_as_a_ready_document(tenant, handbook, syncer):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE, run.error
    assert (run.seen, run.added, run.changed, run.removed, run.failed) == (3, 3, 0, 0, 0)
    assert titles(tenant) == ["Hotels", "Trains", "Welcome"]
    assert set(Document.objects.values_list("status", flat=True)) == {Document.Status.READY}
    origins = set(Document.objects.values_list("origin", flat=True))
    assert f"{handbook}/travel/hotels.md" in origins
    assert services.source_status(source=source).ready


def test_a_resync_with_nothing_changed_reads_no_content(tenant, handbook, syncer):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    syncer(source)
    versions = dict(Document.objects.values_list("id", "version"))
    run = syncer(source)
    assert (run.seen, run.unchanged, run.added, run.changed, run.removed) == (3, 3, 0, 0, 0)
    assert run.bytes_read == 0  # mtime and size alone
    assert dict(Document.objects.values_list("id", "version")) == versions


def test_a_changed_file_is_replaced_and_a_touched_one_is_not(tenant, handbook, syncer):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    syncer(source)
    hotels = handbook / "travel" / "hotels.md"
    hotels.write_text(HOTELS.replace("EUR 180", "EUR 210"))
    os.utime(hotels, (time.time() + 5, time.time() + 5))
    trains = handbook / "travel" / "trains.txt"
    os.utime(trains, (time.time() + 5, time.time() + 5))  # touched, same bytes
    run = syncer(source)
    assert (run.changed, run.unchanged, run.added) == (1, 2, 0)
    assert run.bytes_read == len(hotels.read_bytes()) + len(trains.read_bytes())
    document = Document.objects.get(title="Hotels")
    assert document.version == 2
    assert "EUR 210" in Chunk.objects.get(document=document).text
    assert Document.objects.get(title="Trains").version == 1


def test_a_deleted_file_leaves_with_its_document_passages_and_vectors(tenant, handbook, syncer):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    syncer(source)
    document = Document.objects.get(title="Trains")
    (handbook / "travel" / "trains.txt").unlink()
    run = syncer(source)
    assert run.removed == 1
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not SourceItem.objects.filter(key="travel/trains.txt").exists()
    assert titles(tenant) == ["Hotels", "Welcome"]


def test_a_symbolic_link_loop_and_a_link_outside_the_folder_are_failures_with_reasons(
    tenant, handbook, syncer, tmp_path
):
    (handbook / "travel" / "again").symlink_to(handbook)
    secret = write(tmp_path / "elsewhere" / "passwords.txt", "root: hunter2\n")
    (handbook / "passwords.txt").symlink_to(secret)
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE
    assert run.added == 3
    assert run.failed == 2
    reasons = dict(SourceItem.objects.filter(status="failed").values_list("key", "error"))
    assert "loop" in reasons["travel/again"]
    assert "outside the synced folder" in reasons["passwords.txt"]
    assert not Chunk.objects.filter(text__contains="hunter2").exists()


def test_a_ten_gigabyte_file_is_refused_by_its_size_without_reading_it(tenant, handbook, syncer):
    huge = handbook / "archive.txt"
    with open(huge, "wb") as handle:  # sparse: takes no disk
        handle.truncate(10 * 1024**3)
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    started = time.monotonic()
    run = syncer(source)
    assert time.monotonic() - started < 30
    assert run.failed == 1
    assert run.added == 3
    assert run.bytes_read < 10 * 1024 * 1024
    error = SourceItem.objects.get(key="archive.txt").error
    assert "10.0 GB" in error
    assert "not read" in error


def test_a_folder_outside_the_allowed_ones_is_refused_when_saved(tenant, share, tmp_path):
    outside = tmp_path / "etc"
    outside.mkdir()
    source = Source(tenant=tenant, name="etc", kind=Source.Kind.FOLDER, location=str(outside))
    with pytest.raises(Exception, match="outside the folders this server may sync"):
        services.source_save(source=source)
    via_dots = Source(tenant=tenant, name="dots", kind=Source.Kind.FOLDER,
                      location=f"{share}/../../etc")  # fmt: skip
    with pytest.raises(Exception, match="outside the folders"):
        services.source_save(source=via_dots)


def test_no_folder_may_be_synced_until_the_server_lists_some(tenant, tmp_path, settings):
    settings.QASSIST_SOURCE_FOLDERS = []
    source = Source(tenant=tenant, name="x", kind=Source.Kind.FOLDER, location=str(tmp_path))
    with pytest.raises(Exception, match="QASSIST_SOURCE_FOLDERS"):
        services.source_save(source=source)


def test_a_folder_that_vanished_fails_the_run_and_keeps_its_documents(
    tenant, handbook, syncer, share
):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    syncer(source)
    handbook.rename(handbook.with_name("moved"))  # the share unmounted, say
    run = syncer(source)
    assert run.status == SourceRun.Status.FAILED
    assert "does not exist" in run.error
    assert titles(tenant) == ["Hotels", "Trains", "Welcome"]  # nothing removed


def test_the_document_limit_stops_the_sync_and_removes_nothing(tenant, handbook, syncer):
    source = make_source(tenant, Source.Kind.FOLDER, str(handbook))
    syncer(source)
    Source.objects.filter(pk=source.pk).update(max_documents=2)
    source.refresh_from_db()
    write(handbook / "zzz.md", "# Late\n\nA late file.\n")
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE
    assert "limit of 2 documents" in run.notice
    assert titles(tenant) == ["Hotels", "Trains", "Welcome"]


def test_the_size_limit_refuses_the_file_that_would_cross_it(tenant, share, syncer):
    write(share / "a.md", "# A\n\n" + "word " * 100_000)  # about 500 KB
    write(share / "b.md", "# B\n\nsmall\n")
    source = make_source(tenant, Source.Kind.FOLDER, str(share), max_total_mb=0)
    run = syncer(source)
    assert run.failed == 2
    assert "limit of 0 bytes" in SourceItem.objects.get(key="a.md").error


def test_a_broken_source_does_not_stop_another(tenant, handbook, syncer, share):
    good = make_source(tenant, Source.Kind.FOLDER, str(handbook), name="good")
    other = share.parent / "other"
    other.mkdir()
    bad = make_source(tenant, Source.Kind.FOLDER, str(other), name="bad")
    other.rmdir()
    assert syncer(bad).status == SourceRun.Status.FAILED
    assert syncer(good).status == SourceRun.Status.DONE
    assert titles(tenant) == ["Hotels", "Trains", "Welcome"]
