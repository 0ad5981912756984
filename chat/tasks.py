"""Celery tasks: each takes ids (or nothing) and calls one service."""

from __future__ import annotations

import threading

from celery import shared_task
from django.db import close_old_connections, transaction

from chat import batches, cached_replies, cached_reply_csv
from chat.services.replies import replies_interrupt_stale
from inference.service import engine_mode


@shared_task
def interrupt_stale_replies() -> int:
    """Scheduled every 30 s by beat: replies a dead web process left 'streaming' (not written
    to for chat.services.replies.STALE_STREAM_SECONDS) end as interrupted, their text kept.
    Returns how many were marked. A reply cut by a dead inference worker does not wait for
    this: its web process hears `worker_down` as soon as the worker's heartbeat lapses and ends
    it at once."""
    return replies_interrupt_stale()


@shared_task
def draft_cached_reply_answer(candidate_id: int) -> str:
    """Ask the model, at background priority, for a draft answer to a candidate question."""
    return cached_replies.candidate_draft_answer(candidate_id=candidate_id).draft_status


def draft_dispatch(*, candidate_id: int) -> None:
    """Start a draft once the request's transaction commits. With Redis, on a Celery worker
    (the shared inference worker runs it on spare sequences). Embedded, the model lives in the
    web process: a Celery worker would load a second copy and compete for the CPU with users'
    replies, so the draft runs on a thread here, against this process's engine."""
    if engine_mode() == "redis":
        transaction.on_commit(lambda: draft_cached_reply_answer.delay(candidate_id))
        return

    def run() -> None:
        try:
            cached_replies.candidate_draft_answer(candidate_id=candidate_id)
        finally:
            close_old_connections()

    transaction.on_commit(lambda: threading.Thread(target=run, daemon=True).start())


@shared_task
def run_batch(batch_id: str) -> str:
    """Run a batch's items at background priority (see chat/batches.py)."""
    return batches.batch_run(batch_id=batch_id)


@shared_task
def resume_batches() -> int:
    """Scheduled by beat: batches whose runner died, or never started, are run again. Redis
    mode only: embedded, batches run in the web process, which resumes them itself."""
    if engine_mode() != "redis":
        return 0
    return batches.batches_resume()


@shared_task
def import_cached_replies(import_id: str) -> str:
    """A large CSV import of cached replies (chat/cached_reply_csv.py); returns its status."""
    return cached_reply_csv.cached_reply_import_run(import_id=import_id).status


@shared_task
def resume_cached_reply_imports() -> int:
    """Scheduled by beat: imports whose message was lost are sent again."""
    return cached_reply_csv.cached_reply_imports_resume()
