"""The Celery worker yields the CPU to the engine: it lowers its own priority as it starts."""

from __future__ import annotations

import pytest

from qassist import celery


def test_the_worker_lowers_its_priority_by_the_setting(monkeypatch, settings) -> None:
    calls: list[int] = []
    monkeypatch.setattr("os.nice", calls.append)
    settings.QASSIST_CELERY_NICE = 19
    celery.lower_priority()
    settings.QASSIST_CELERY_NICE = 0
    celery.lower_priority()
    assert calls == [19]


@pytest.mark.parametrize("signal_name", ["worker_init"])
def test_it_runs_when_a_worker_starts(signal_name: str) -> None:
    from celery import signals

    receivers = [r[1]() for r in getattr(signals, signal_name).receivers]
    assert celery.lower_priority in receivers
