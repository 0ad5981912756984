"""Celery tasks: each takes ids (or nothing) and calls one service."""

from __future__ import annotations

from celery import shared_task

from chat import services


@shared_task
def interrupt_stale_replies() -> int:
    """Scheduled every 30 s by beat: replies a dead web process left 'streaming' (not written
    to for services.STALE_STREAM_SECONDS) end as interrupted, their text kept. Returns how many
    were marked. A reply cut by a dead inference worker does not wait for this: its web process
    hears `worker_down` as soon as the worker's heartbeat lapses and ends it at once."""
    return services.replies_interrupt_stale()
