"""A real Celery worker for the test that SIGKILLs one in the middle of a sync.

    python -m tests.sources.celery_child start RUN_ID   queue the run's slice, then work
    python -m tests.sources.celery_child tick           beat's task once (resumes), then work

DATABASE_URL names the test database and QASSIST_VAR_DIR a folder of its own (the filesystem
broker lives there). Indexing uses the tests' fake embedder and token counter, so the worker
loads no model.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()
    from inference.service import set_prompt_counter
    from knowledge.embeddings import set_embedder
    from qassist.celery import app
    from sources import services
    from sources.tasks import sync_source
    from tests.fakes import FakeCounter, FakeEmbedder

    set_embedder(FakeEmbedder())
    counter = FakeCounter()
    counter.runner.max_seq_tokens = 4096
    set_prompt_counter(counter)
    if sys.argv[1] == "start":
        sync_source.apply_async((int(sys.argv[2]),), queue="knowledge")
    else:
        services.sources_tick()
    print("working", flush=True)
    app.worker_main(
        ["worker", "--pool", "solo", "-Q", "knowledge", "--without-mingle",
         "--without-gossip", "--without-heartbeat", "--loglevel", "WARNING"]
    )  # fmt: skip


if __name__ == "__main__":
    main()
