import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")

app = Celery("qassist")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def lower_priority(**kwargs: object) -> None:
    """Everything the Celery worker does is background work (indexing, syncing sources,
    imports); on the same cores as the engine it must not slow anyone's first token. Measured
    with bench/sources.py: a chat turn's TTFT during a sync was 6.3x idle at the same
    priority, 1.35x with the syncing process at nice 19 (docs/BENCHMARKS.md)."""
    from django.conf import settings

    niceness = int(settings.QASSIST_CELERY_NICE)
    if niceness > 0:
        os.nice(niceness)
