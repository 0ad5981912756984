"""Celery tasks: each takes ids (or nothing) and calls one service."""

from __future__ import annotations

from celery import shared_task

from chat import services


@shared_task
def interrupt_stale_replies() -> int:
    """Scheduled every minute by beat: replies a dead process left 'streaming' end as
    interrupted, their text kept. Returns how many were marked."""
    return services.replies_interrupt_stale()
