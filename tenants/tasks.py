"""Celery tasks: each takes ids (or nothing) and calls one service."""

from __future__ import annotations

from celery import shared_task

from tenants import usage


@shared_task
def rollup_usage() -> int:
    """Scheduled hourly by beat: past days' usage summed into the daily roll-up tables.
    Returns how many days were (re)computed."""
    return len(usage.usage_rollup())
