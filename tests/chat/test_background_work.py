"""Background work that does not look stuck: drafts staff wait for have a queue of their own
ahead of batches, and the admin shows a queued job's place and a wait, a running one's
progress, and a batch's results as a table.

The worker's side (a runner giving way between items) is in test_batches.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import cached_replies
from chat.batches import BatchRequest, batch_create
from chat.models import Batch, CachedReplyCandidate
from chat.progress import batch_outlook, draft_outlook, duration_text
from inference.types import ChatMessage, SamplingParams
from tenants.models import Tenant
from tests import needs

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = needs.TEST_REDIS_URL


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- queues ----------------------------------------------------------------------------------


def queue_of(task_name: str) -> str:
    from qassist.celery import app

    route = app.amqp.router.route({}, task_name, args=(), kwargs={})
    return str(route["queue"].name)


def test_drafts_batches_and_housekeeping_go_to_queues_of_their_own():
    assert queue_of("chat.tasks.draft_cached_reply_answer") == "interactive"
    assert queue_of("chat.tasks.run_batch") == "batches"
    assert queue_of("chat.tasks.interrupt_stale_replies") == "celery"
    assert queue_of("tenants.tasks.rollup_usage") == "celery"


@pytest.mark.parametrize("procfile", ["Procfile", "Procfile.embedded"])
def test_the_worker_takes_the_queues_in_order_interactive_first(procfile):
    (line,) = [
        line for line in (REPO / procfile).read_text().splitlines() if line.startswith("celery:")
    ]
    queues = re.search(r"-Q (\S+)", line)
    assert queues is not None, line
    assert tuple(queues.group(1).split(",")) == settings.CELERY_QUEUES_IN_ORDER
    assert settings.CELERY_QUEUES_IN_ORDER[0] == "interactive"
    assert settings.CELERY_QUEUES_IN_ORDER[-1] == "batches"
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    assert routed | {settings.CELERY_TASK_DEFAULT_QUEUE} <= set(settings.CELERY_QUEUES_IN_ORDER)
    assert settings.CELERY_WORKER_PREFETCH_MULTIPLIER == 1


def redis_transport_options() -> dict[str, object]:
    """CELERY_BROKER_TRANSPORT_OPTIONS as settings.py makes it when REDIS_URL is set."""
    env = {**os.environ, "REDIS_URL": REDIS_URL, "DJANGO_SETTINGS_MODULE": "qassist.settings"}
    code = (
        "import json, qassist.settings as s; print(json.dumps(s.CELERY_BROKER_TRANSPORT_OPTIONS))"
    )
    done = subprocess.run(  # noqa: S603  # this interpreter, a fixed script
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    import json

    options: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return options


@pytest.mark.redis
def test_with_redis_a_free_worker_takes_a_waiting_draft_before_a_waiting_batch():
    import kombu
    import redis
    from celery import Celery

    needs.redis_url()  # skips (fails in CI) when no Redis answers there
    prefix = f"qtest-{uuid.uuid4().hex[:8]}:"
    app = Celery("queue-order", broker=REDIS_URL)
    app.conf.update(
        broker_transport_options={**redis_transport_options(), "global_keyprefix": prefix},
        task_routes=settings.CELERY_TASK_ROUTES,
        task_default_queue=settings.CELERY_TASK_DEFAULT_QUEUE,
    )
    taken: list[str] = []

    def on_message(body: object, message: kombu.Message) -> None:
        taken.append(message.headers["task"])
        message.ack()

    queues = [kombu.Queue(name) for name in settings.CELERY_QUEUES_IN_ORDER]
    try:
        with (
            app.connection_for_read() as conn,
            conn.Consumer(queues, callbacks=[on_message], prefetch_count=1),
        ):
            app.send_task("chat.tasks.run_batch", args=["a batch"])
            app.send_task("chat.tasks.draft_cached_reply_answer", args=[1])
            conn.drain_events(timeout=5)
            # A draft asked for while a batch waits goes first again: the queues are taken in
            # order every time, not in turns (round robin would now serve the batch).
            app.send_task("chat.tasks.draft_cached_reply_answer", args=[2])
            conn.drain_events(timeout=5)
            conn.drain_events(timeout=5)
    finally:
        r = redis.Redis.from_url(REDIS_URL)
        keys = list(r.scan_iter(f"{prefix}*"))
        if keys:
            r.delete(*keys)
    assert taken == [
        "chat.tasks.draft_cached_reply_answer",
        "chat.tasks.draft_cached_reply_answer",
        "chat.tasks.run_batch",
    ]


# --- drafts: a place in the queue, then progress -------------------------------------------


def candidate(tenant: Tenant, question: str) -> CachedReplyCandidate:
    for _ in range(2):
        found = cached_replies.candidate_record(tenant=tenant, question=question, answer="…")
    assert found is not None
    return found


def finished_drafts(tenant: Tenant, *seconds: float) -> None:
    now = timezone.now()
    for n, duration in enumerate(seconds):
        c = candidate(tenant, f"done {n}")
        CachedReplyCandidate.objects.filter(pk=c.pk).update(
            draft_status="ready",
            draft_started_at=now - timedelta(seconds=duration),
            draft_finished_at=now,
        )


def test_a_queued_draft_knows_how_many_are_ahead_and_about_how_long(tenant):
    finished_drafts(tenant, 10, 20)  # lately a draft took 15 s
    first, second, third = (candidate(tenant, q) for q in ("a?", "b?", "c?"))
    for c in (first, second, third):
        assert cached_replies.candidate_draft_start(candidate=c)
    third.refresh_from_db()
    outlook = draft_outlook(third)
    assert (outlook.ahead, outlook.seconds_left) == (2, 45)
    first.refresh_from_db()
    assert draft_outlook(first).ahead == 0


def test_without_history_there_is_a_place_but_no_estimate(tenant):
    c = candidate(tenant, "a?")
    cached_replies.candidate_draft_start(candidate=c)
    c.refresh_from_db()
    assert draft_outlook(c).ahead == 0
    assert draft_outlook(c).seconds_left is None


def test_the_candidates_list_shows_the_queue_and_the_draft_being_written(
    admin_client, tenant, monkeypatch
):
    finished_drafts(tenant, 15)
    writing, waiting = candidate(tenant, "Wifi?"), candidate(tenant, "VPN?")
    for c in (writing, waiting):
        cached_replies.candidate_draft_start(candidate=c)
    started = timezone.now()
    CachedReplyCandidate.objects.filter(pk=writing.pk).update(
        draft_status="running", draft_started_at=started, draft_answer="The guest net"
    )
    # The page is read the instant the draft started: the wait left is the whole typical one,
    # however slowly a loaded machine gets to the request.
    monkeypatch.setattr(timezone, "now", lambda: started)
    page = admin_client.get(reverse("admin:chat_cachedreplycandidate_changelist")).content.decode()
    assert "Drafting… 13 characters so far · about 15 s left" in page
    assert "Queued · 1 ahead · ready in about 30 s" in page
    assert page.count('data-qa-busy="1"') == 2
    assert "qassist_admin/refresh.js" in page


@pytest.mark.django_db(transaction=True)  # the draft reads and writes from its event loop
def test_a_draft_is_marked_running_and_saved_as_it_grows(tenant, monkeypatch):
    from channels.db import database_sync_to_async

    from inference.service import EngineClient, set_engine_client
    from inference.types import Delta, Done

    monkeypatch.setattr(cached_replies, "DRAFT_PROGRESS_SECONDS", 0)
    c = candidate(tenant, "Wifi?")
    cached_replies.candidate_draft_start(candidate=c)
    seen: list[tuple[str, str]] = []

    def look() -> None:
        row = CachedReplyCandidate.objects.get(pk=c.pk)
        seen.append((row.draft_status, row.draft_answer))

    class Engine:
        async def generate(self, sub):
            await database_sync_to_async(look)()
            yield Delta(sub.request_id, "Ask ")
            await database_sync_to_async(look)()
            yield Delta(sub.request_id, "reception.")
            yield Done(sub.request_id, "stop", 4, 2)

    set_engine_client(cast(EngineClient, Engine()))  # it only needs generate()
    try:
        done = cached_replies.candidate_draft_answer(candidate_id=c.pk)
    finally:
        set_engine_client(None)
    assert seen == [("running", ""), ("running", "Ask ")]
    assert done.draft_status == "ready"
    assert done.draft_answer == "Ask reception."
    asked, started, ended = done.draft_requested_at, done.draft_started_at, done.draft_finished_at
    assert asked is not None
    assert started is not None
    assert ended is not None
    assert asked <= started <= ended


def test_a_draft_lost_on_the_way_can_be_asked_for_again(tenant):
    c = candidate(tenant, "Wifi?")
    assert cached_replies.candidate_draft_start(candidate=c)
    assert not cached_replies.candidate_draft_start(candidate=c)
    CachedReplyCandidate.objects.filter(pk=c.pk).update(
        draft_requested_at=timezone.now() - timedelta(minutes=11)
    )
    assert cached_replies.candidate_draft_start(candidate=c)


# --- batches: a place in the queue, progress, results on the page -------------------------


def make_batch(tenant: Tenant, n: int, name: str = "") -> Batch:
    return batch_create(
        tenant=tenant,
        name=name,
        requests=[
            BatchRequest([ChatMessage("user", f"prompt {i}")], SamplingParams(max_tokens=8))
            for i in range(n)
        ],
    )


def items_took(batch: Batch, seconds: float) -> None:
    now = timezone.now()
    batch.items.update(status="done", started_at=now - timedelta(seconds=seconds), finished_at=now)


def test_a_queued_batch_waits_for_earlier_batches_and_for_drafts(tenant, settings):
    settings.QASSIST_BATCH_CONCURRENCY = 2
    items_took(make_batch(tenant, 4), 10)  # lately an item took 10 s
    Batch.objects.update(status="completed")
    running = make_batch(tenant, 4)
    Batch.objects.filter(pk=running.pk).update(status="running")
    running.items.filter(index=0).update(status="done")
    waiting = make_batch(tenant, 2)
    c = candidate(tenant, "Wifi?")
    cached_replies.candidate_draft_start(candidate=c)

    outlook = batch_outlook(waiting)
    assert outlook.ahead == 2  # the running batch and the draft
    assert outlook.seconds_left == (3 + 2) * 10 / 2
    running.refresh_from_db()
    assert batch_outlook(running) == type(outlook)(0, 3 * 10 / 2)


def test_the_batches_list_says_what_a_batch_waits_for(admin_client, tenant):
    items_took(make_batch(tenant, 2), 30)
    Batch.objects.update(status="completed")
    first = make_batch(tenant, 2, "first")
    make_batch(tenant, 2, "second")
    Batch.objects.filter(pk=first.pk).update(status="running")
    page = admin_client.get(reverse("admin:chat_batch_changelist")).content.decode()
    assert "Running · about 30 s left" in page
    assert "Queued · 1 job(s) ahead · done in about 1 min" in page
    assert page.count('data-qa-busy="1"') == 2


def test_a_finished_batch_shows_its_results_as_a_table(admin_client, tenant):
    batch = make_batch(tenant, 3, "faq")
    batch.items.filter(index=0).update(
        status="done", content="VPN: open the app.", prompt_tokens=7, completion_tokens=5
    )
    batch.items.filter(index=1).update(
        status="failed", error_code="quota_exceeded", error="The daily quota is used up."
    )
    batch.items.filter(index=2).update(status="cancelled")
    Batch.objects.filter(pk=batch.pk).update(status="completed")
    page = admin_client.get(reverse("admin:chat_batch_change", args=[batch.pk]))
    html = page.content.decode()
    rows = re.findall(r"<tr class=\"item-[a-z]+\">(.*?)</tr>", html, re.DOTALL)
    assert len(rows) == 3
    assert "prompt 0" in rows[0]
    assert "VPN: open the app." in rows[0]
    assert "7 + 5" in rows[0]
    assert "quota_exceeded: The daily quota is used up." in rows[1]
    assert "Cancelled" in rows[2]
    assert 'name="_save"' not in html
    assert "data-qa-busy" not in html
    assert "Download results (JSONL)" in html


def test_a_long_batchs_results_come_a_page_at_a_time(admin_client, tenant):
    batch = make_batch(tenant, 60)
    url = reverse("admin:chat_batch_change", args=[batch.pk])
    first = admin_client.get(url).content.decode()
    assert first.count('<tr class="item-pending">') == 50
    assert "Items 1–50 of 60" in first
    second = admin_client.get(url, {"p": 2}).content.decode()
    assert second.count('<tr class="item-pending">') == 10
    assert "prompt 59" in second


def test_a_tenant_admin_cancels_a_batch_from_its_page(tenant_admin, tenant, other_tenant):
    ours = make_batch(tenant, 2)
    client = client_for(tenant_admin)
    page = client.get(reverse("admin:chat_batch_change", args=[ours.pk])).content.decode()
    assert "Cancel this batch" in page
    client.post(
        reverse("admin:chat_batch_changelist"),
        {"action": "cancel_selected", "_selected_action": [ours.pk]},
    )
    ours.refresh_from_db()
    assert ours.status == "cancelled"
    page = client.get(reverse("admin:chat_batch_change", args=[ours.pk])).content.decode()
    assert "Cancel this batch" not in page


def test_waits_read_as_people_say_them():
    assert duration_text(12) == "about 10 s"
    assert duration_text(2) == "about 5 s"
    assert duration_text(170) == "about 3 min"
    assert duration_text(5400) == "about 1.5 h"
