"""A sync whose Celery worker is SIGKILLed mid-way resumes from its checkpoint, while the
documents as they were keep answering."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from knowledge.models import Chunk, Document
from sources.models import Source, SourceRun
from tests.sources.conftest import make_source

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = 24


def _database_url() -> str:
    db = django_settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user, host, port = db.get("USER") or "postgres", db.get("HOST"), db.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def _worker(args: list[str], var: Path, settings) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "QASSIST_VAR_DIR": str(var),
        "QASSIST_SOURCE_LEASE_SECONDS": "2",
        "QASSIST_SOURCE_SLICE_SECONDS": "5",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "SECRET_KEY": django_settings.SECRET_KEY,
    }
    env.pop("REDIS_URL", None)  # the filesystem broker, under `var`
    return subprocess.Popen(  # noqa: S603  # this interpreter, the repository's own module
        [sys.executable, "-m", "tests.sources.celery_child", *args],
        cwd=settings.BASE_DIR,
        env=env,
    )


def _wait(condition, what: str, child: subprocess.Popen[bytes], within: float = 180) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert child.poll() is None, f"the worker ended before {what}"
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.2)


def test_a_sync_killed_mid_way_resumes_and_the_old_documents_answer_meanwhile(
    tenant, site, syncer, tmp_path, settings, document_dispatches
):
    index = "".join(f'<a href="p{n}.html">{n}</a>' for n in range(PAGES))
    site.page("w/index.html", index, title="Index")
    for n in range(PAGES):
        site.page(f"w/p{n}.html", f"<p>Policy {n} says version one.</p>", title=f"Policy {n}")
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/w/index.html",
                         delay_seconds=0.3)  # fmt: skip
    first = syncer(source)
    assert first.added == PAGES + 1
    later = time.time() + 5
    for n in range(PAGES):
        path = site.page(f"w/p{n}.html", f"<p>Policy {n} says version two.</p>",
                         title=f"Policy {n}")  # fmt: skip
        os.utime(path, (later, later))
    run = source.runs.create()  # what "Sync now" makes; the worker below queues its slice
    var = tmp_path / "var"
    for folder in ("queue", "processed", "control"):  # as `make run` makes them
        (var / "celery" / folder).mkdir(parents=True)

    killed = _worker(["start", str(run.pk)], var, settings)
    try:
        _wait(lambda: SourceRun.objects.get(pk=run.pk).changed >= 5, "five pages changed", killed)
    finally:
        killed.kill()  # SIGKILL: no clean-up of any kind, like a worker the OOM killer took
        killed.wait()
    run.refresh_from_db()
    assert run.status == SourceRun.Status.RUNNING
    assert 5 <= run.changed < PAGES
    # Meanwhile every page still answers, from its last good version at least.
    assert Document.objects.filter(tenant=tenant).count() == PAGES + 1
    assert Chunk.objects.filter(document__tenant=tenant).values("document").distinct().count() == (
        PAGES + 1
    )

    time.sleep(2.5)  # its lease lapses
    resumed = _worker(["tick"], var, settings)
    try:
        _wait(
            lambda: (
                SourceRun.objects.get(pk=run.pk).status != SourceRun.Status.RUNNING
                and not Document.objects.exclude(status=Document.Status.READY).exists()
            ),
            "the run and its indexing finished",
            resumed,
        )
    finally:
        resumed.kill()
        resumed.wait()
    run.refresh_from_db()
    assert run.status == SourceRun.Status.DONE, run.error
    assert run.resumed >= 1
    # Each page changed once: what the killed slice had done was not done again.
    assert run.changed == PAGES
    assert run.removed == 0
    assert run.failed == 0
    assert Document.objects.filter(tenant=tenant).count() == PAGES + 1
    texts = list(Chunk.objects.filter(document__title__startswith="Policy").values_list(
        "text", flat=True))  # fmt: skip
    assert len(texts) == PAGES
    assert all("version two" in t for t in texts)
