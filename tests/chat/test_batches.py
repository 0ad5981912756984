"""Batch jobs: REST submission, the runner at background priority, quotas, restarts, admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import batches
from chat.batches import batch_dispatch as real_batch_dispatch  # before fixtures replace it
from chat.models import Batch, BatchItem
from chat.tasks import resume_batches, run_batch
from inference.service import set_engine_client
from inference.types import ChatMessage, Delta, Done, Event, Failed, SamplingParams
from inference.worker import Submission
from tenants.models import UsageRecord

# The runner and the REST views are async: their database work runs on other connections.
pytestmark = pytest.mark.django_db(transaction=True)


class FakeEngine:
    """Answers each submission with "answer to <last message>"; `script` can replace the
    events of the n-th submission (0-based)."""

    def __init__(self, script=None):
        self.submissions: list[Submission] = []
        self.script = script or {}

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        n = len(self.submissions)
        self.submissions.append(sub)
        rid = sub.request_id
        if n in self.script:
            for event in self.script[n](rid):
                yield event
            return
        text = f"answer to {sub.messages[-1].content}"
        yield Delta(rid, text)
        yield Done(rid, "stop", 10, 4, ttft_ms=123)

    async def served_models(self) -> list[str]:
        return []

    async def cancel(self, request_id: str) -> None:
        pass

    def at_capacity(self, model: str = "") -> bool:
        return False  # its refusals come from the engine path

    async def health(self):
        return {}


@pytest.fixture
def engine():
    fake = FakeEngine()
    set_engine_client(fake)
    yield fake
    set_engine_client(None)


def make_batch(tenant, prompts, **kw):
    return batches.batch_create(
        tenant=tenant,
        requests=[
            batches.BatchRequest(
                messages=[ChatMessage("user", p)], params=SamplingParams(max_tokens=16)
            )
            for p in prompts
        ],
        **kw,
    )


def statuses(batch):
    return list(batch.items.order_by("index").values_list("status", flat=True))


# --- the runner ------------------------------------------------------------------------------


def test_a_batch_runs_every_item_at_background_priority_and_records_usage(tenant, engine):
    tenant.priority = 2
    tenant.save()
    batch = make_batch(tenant, ["one", "two", "three"])

    assert batches.batch_run(batch_id=batch.id) == "completed"

    batch.refresh_from_db()
    assert batch.status == Batch.Status.COMPLETED
    assert batch.finished_at is not None
    items = list(batch.items.order_by("index"))
    assert [i.content for i in items] == ["answer to one", "answer to two", "answer to three"]
    assert all(i.status == "done" and i.attempts == 1 for i in items)
    assert all(sub.background for sub in engine.submissions)
    assert all(sub.priority < tenant.priority for sub in engine.submissions)
    usage = UsageRecord.objects.filter(tenant=tenant, reason="batch")
    assert usage.count() == 3
    assert sum(u.prompt_tokens + u.completion_tokens for u in usage) == 3 * 14
    assert all(u.ttft_ms is None for u in usage)  # the usage pages' TTFT is what people wait for


def test_a_batch_is_not_held_back_by_the_per_minute_rate(tenant, engine):
    tenant.requests_per_minute = 1
    tenant.tokens_per_minute = 10
    tenant.save()
    batch = make_batch(tenant, ["a", "b", "c", "d"])
    assert batches.batch_run(batch_id=batch.id) == "completed"
    assert statuses(batch) == ["done"] * 4


def test_a_batch_counts_against_the_token_quota_item_by_item(tenant, engine):
    # Each item reserves its prompt plus 16 tokens; the quota holds about two of them.
    tenant.daily_token_quota = 60
    tenant.save()
    batch = make_batch(tenant, ["a", "b", "c", "d", "e"])
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "completed"
    got = statuses(batch)
    assert got[:2] == ["done", "done"]
    assert set(got[2:]) == {"failed"}
    failed = batch.items.filter(status="failed")
    assert set(failed.values_list("error_code", flat=True)) == {"quota_exceeded"}
    assert len(engine.submissions) == got.count("done")


def test_a_dead_runners_batch_resumes_without_running_a_finished_item_again(tenant, engine):
    batch = make_batch(tenant, ["zero", "one", "two"])
    long_ago = timezone.now() - timedelta(minutes=10)
    Batch.objects.filter(pk=batch.pk).update(
        status="running", runner="dead", heartbeat_at=long_ago, started_at=long_ago
    )
    batch.items.filter(index=0).update(status="done", content="kept", attempts=1)
    batch.items.filter(index=1).update(status="running", attempts=1)  # killed mid-generation

    assert batch.pk in batches.batches_stale()
    assert batches.batch_run(batch_id=batch.id) == "completed"

    assert [s.messages[-1].content for s in engine.submissions] == ["one", "two"]
    items = list(batch.items.order_by("index"))
    assert items[0].content == "kept"
    assert [i.status for i in items] == ["done"] * 3
    assert items[1].attempts == 2


def _database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user, host, port = db.get("USER") or "postgres", db.get("HOST"), db.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def test_a_batch_resumes_after_its_runner_process_is_killed(tenant, engine, settings):
    batch = make_batch(tenant, ["a0", "a1", "hang here", "a3"])
    env = {**os.environ, "DATABASE_URL": _database_url(), "QASSIST_ENGINE": "embedded"}
    env.pop("REDIS_URL", None)
    child = subprocess.Popen(  # noqa: S603  # this interpreter, the repository's own module
        [sys.executable, "-m", "tests.chat.batch_runner_child", str(batch.id)],
        cwd=settings.BASE_DIR,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not batch.items.filter(index=2, status="running").exists():
            assert child.poll() is None, "the runner process ended early"
            assert time.monotonic() < deadline, "the runner never reached the hanging item"
            time.sleep(0.05)
    finally:
        child.kill()  # as a crashed worker: no clean-up of any kind
        child.wait()
    assert statuses(batch) == ["done", "done", "running", "pending"]
    batch.refresh_from_db()
    assert batch.status == "running"
    assert batch.runner != ""

    settings.QASSIST_BATCH_STALE_SECONDS = 0.2
    time.sleep(0.3)  # its heartbeat goes stale
    assert batch.pk in batches.batches_stale()
    engine.script = {}
    assert batches.batch_run(batch_id=batch.id) == "completed"

    # Only the unfinished items ran again; the finished ones kept their results.
    assert [s.messages[-1].content for s in engine.submissions] == ["hang here", "a3"]
    items = list(batch.items.order_by("index"))
    assert [i.content for i in items[:2]] == ["answer to a0", "answer to a1"]
    assert [i.status for i in items] == ["done"] * 4
    assert UsageRecord.objects.filter(reason="batch").count() == 4


def test_a_live_runners_batch_is_left_to_it(tenant, engine):
    batch = make_batch(tenant, ["a"])
    Batch.objects.filter(pk=batch.pk).update(
        status="running", runner="alive", heartbeat_at=timezone.now()
    )
    assert batch.pk not in batches.batches_stale()
    assert batches.batch_run(batch_id=batch.id) == "busy"
    assert engine.submissions == []


def test_a_late_result_from_a_runner_presumed_dead_is_dropped(tenant):
    batch = make_batch(tenant, ["a"])
    item = batch.items.get()
    BatchItem.objects.filter(pk=item.pk).update(status="running", attempts=1)
    item.refresh_from_db()
    # Another runner took over and started attempt 2 meanwhile.
    BatchItem.objects.filter(pk=item.pk).update(attempts=2)
    batches._store(batch, item, "stale text", Done("r", "stop", 1, 1))
    item.refresh_from_db()
    assert item.status == "running"
    assert item.content == ""
    assert not UsageRecord.objects.exists()


def test_an_item_waits_for_a_worker_that_is_down_without_using_up_its_attempts(
    tenant, engine, monkeypatch
):
    monkeypatch.setattr(batches, "RETRY_SECONDS", 0.05)
    engine.script = {
        0: lambda rid: [Failed(rid, "worker_down", "No inference worker is running.")],
        1: lambda rid: [Failed(rid, "worker_down", "No inference worker is running.")],
    }
    batch = make_batch(tenant, ["a"])
    assert batches.batch_run(batch_id=batch.id) == "completed"
    item = batch.items.get()
    assert item.status == "done"
    assert item.attempts == 1
    assert len(engine.submissions) == 3


def test_revoking_the_key_stops_its_batch(tenant, api_key, engine):
    from tenants.services import api_key_revoke

    batch = make_batch(tenant, ["a", "b"], api_key=api_key[0])
    api_key_revoke(api_key=api_key[0])
    assert batches.batch_run(batch_id=batch.id) == "completed"
    assert statuses(batch) == ["failed", "failed"]
    assert engine.submissions == []
    assert "revoked" in batch.items.first().error


def test_an_item_the_engine_refuses_fails_with_the_reason(tenant, engine):
    engine.script = {0: lambda rid: [Failed(rid, "prompt_too_long", "Too long.")]}
    batch = make_batch(tenant, ["a", "b"])
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "completed"
    first, second = batch.items.order_by("index")
    assert (first.status, first.error_code, first.error) == (
        "failed",
        "prompt_too_long",
        "Too long.",
    )
    assert second.status == "done"


def test_a_batch_gives_its_worker_back_after_its_time_slice(tenant, engine):
    batch = make_batch(tenant, ["a", "b"])
    assert batches.batch_run(batch_id=batch.id, slice_seconds=0) == "yielded"
    batch.refresh_from_db()
    assert batch.runner == ""
    assert batch.status == "running"
    assert batches.batch_run(batch_id=batch.id) == "completed"


def test_a_batch_with_an_item_missing_is_never_called_complete(tenant, engine):
    batch = make_batch(tenant, ["a", "b"])
    batch.items.filter(index=1).delete()
    assert batches.batch_run(batch_id=batch.id) == "incomplete"
    batch.refresh_from_db()
    assert batch.status != Batch.Status.COMPLETED


def test_cancelling_ends_what_has_not_run(tenant, engine):
    batch = make_batch(tenant, ["a", "b", "c"])
    assert batches.batch_cancel(batch=batch)
    assert statuses(batch) == ["cancelled"] * 3
    assert batches.batch_run(batch_id=batch.id) == "over"
    assert engine.submissions == []
    assert not batches.batch_cancel(batch=batch)


def test_a_new_batch_is_started_once_stored(tenant, batch_dispatches):
    batch = make_batch(tenant, ["a"])
    assert batch_dispatches == [batch.id]


def test_with_redis_a_batch_runs_on_celery_and_embedded_on_a_thread_here(
    tenant, monkeypatch, django_capture_on_commit_callbacks
):
    dispatch = real_batch_dispatch
    first = uuid.uuid4()
    queued: list[str] = []
    threads: list[object] = []
    monkeypatch.setattr("chat.tasks.run_batch.delay", queued.append)
    monkeypatch.setattr("inference.service.engine_mode", lambda: "redis")
    with django_capture_on_commit_callbacks(execute=True):
        dispatch(batch_id=first)
    assert queued == [str(first)]

    class NoThread:
        def __init__(self, target, daemon):
            threads.append(daemon)

        def start(self):
            threads.append("started")

    monkeypatch.setattr("inference.service.engine_mode", lambda: "embedded")
    monkeypatch.setattr("chat.batches.threading.Thread", NoThread)
    with django_capture_on_commit_callbacks(execute=True):
        dispatch(batch_id=uuid.uuid4())
    assert threads == [True, "started"]


def test_the_beat_task_resumes_only_in_redis_mode(tenant, monkeypatch, batch_dispatches):
    batch = make_batch(tenant, ["a"])
    Batch.objects.filter(pk=batch.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    dispatched = batch_dispatches
    dispatched.clear()
    monkeypatch.setattr("chat.tasks.engine_mode", lambda: "embedded")
    assert resume_batches() == 0
    monkeypatch.setattr("chat.tasks.engine_mode", lambda: "redis")
    assert resume_batches() == 1
    assert dispatched == [batch.pk]
    entries = [
        e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == resume_batches.name
    ]
    assert entries == [{"task": "chat.tasks.resume_batches", "schedule": 30.0}]
    assert run_batch.name == "chat.tasks.run_batch"


# --- REST ------------------------------------------------------------------------------------


def bearer(api_key):
    return {"HTTP_AUTHORIZATION": f"Bearer {api_key[1]}"}


def chat_request(text, **extra):
    return {
        "model": settings.QASSIST_MODEL,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def test_rest_creates_a_batch_from_a_list_and_reports_progress(client, api_key, tenant):
    response = client.post(
        "/v1/batches",
        {"name": "tickets", "requests": [chat_request("a", max_tokens=7), chat_request("b")]},
        content_type="application/json",
        **bearer(api_key),
    )
    assert response.status_code == 201
    data = response.json()
    assert data["object"] == "batch"
    assert data["status"] == "queued"
    assert data["request_counts"]["total"] == 2
    assert data["request_counts"]["pending"] == 2
    batch = Batch.objects.get()
    assert batch.api_key == api_key[0]
    assert batch.items.get(index=0).params["max_tokens"] == 7

    detail = client.get(f"/v1/batches/{data['id']}", **bearer(api_key))
    assert detail.json()["id"] == data["id"]
    listing = client.get("/v1/batches", **bearer(api_key)).json()
    assert [b["id"] for b in listing["data"]] == [data["id"]]


def test_rest_accepts_jsonl_with_custom_ids_and_returns_results_as_jsonl(
    client, api_key, tenant, engine
):
    lines = [
        json.dumps({"custom_id": "t-1", "body": chat_request("first")}),
        "",
        json.dumps(chat_request("第二个")),
    ]
    response = client.post(
        "/v1/batches", "\n".join(lines), content_type="application/jsonl", **bearer(api_key)
    )
    assert response.status_code == 201
    batch_id = response.json()["id"]
    batches.batch_run(batch_id=Batch.objects.get().id)

    status = client.get(f"/v1/batches/{batch_id}", **bearer(api_key)).json()
    assert status["status"] == "completed"
    assert status["request_counts"]["completed"] == 2
    results = client.get(f"/v1/batches/{batch_id}/results", **bearer(api_key))
    assert results["Content-Type"] == "application/jsonl"
    rows = [json.loads(line) for line in b"".join(results.streaming_content).decode().splitlines()]
    assert [(r["custom_id"], r["index"]) for r in rows] == [("t-1", 0), (None, 1)]
    assert rows[1]["response"]["choices"][0]["message"]["content"] == "answer to 第二个"
    assert rows[0]["response"]["usage"]["total_tokens"] == 14


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"requests": [{"model": "x"}]}, "requests[0].messages", "Missing required parameter"),
        (
            {"requests": [chat_request("a"), chat_request("b", stream=True)]},
            "requests[1].stream",
            "stream",
        ),
        (
            {
                "requests": [
                    chat_request("a"),
                    chat_request("b", tools=[{"type": "function", "function": {"name": "f"}}]),
                ]
            },
            "requests[1].tools",
            "not available in a batch",
        ),
        ({"requests": []}, "requests", "at least one"),
        ({"requests": [chat_request("a")], "colour": "red"}, "colour", "Unrecognized"),
        ({"prompts": ["a"]}, "requests", "application/jsonl"),
    ],
)
def test_rest_refuses_a_bad_batch_naming_the_request_and_stores_nothing(
    client, api_key, body, param, fragment
):
    response = client.post("/v1/batches", body, content_type="application/json", **bearer(api_key))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert fragment in error["message"]
    assert not Batch.objects.exists()


def test_rest_names_the_bad_line_of_a_jsonl_body(client, api_key):
    body = json.dumps(chat_request("a")) + "\n{not json\n"
    response = client.post("/v1/batches", body, content_type="application/jsonl", **bearer(api_key))
    assert response.status_code == 400
    assert "Line 2" in response.json()["error"]["message"]
    assert not Batch.objects.exists()


def test_rest_refuses_more_items_than_allowed(client, api_key, settings):
    settings.QASSIST_BATCH_MAX_ITEMS = 2
    body = {"requests": [chat_request(str(i)) for i in range(3)]}
    response = client.post("/v1/batches", body, content_type="application/json", **bearer(api_key))
    assert response.status_code == 400
    assert "at most 2" in response.json()["error"]["message"]


def test_another_tenants_batch_is_not_found(client, api_key, other_tenant):
    theirs = make_batch(other_tenant, ["secret"])
    for url in (f"/v1/batches/batch_{theirs.id.hex}", f"/v1/batches/batch_{theirs.id.hex}/results"):
        assert client.get(url, **bearer(api_key)).status_code == 404
    cancel = client.post(f"/v1/batches/batch_{theirs.id.hex}/cancel", **bearer(api_key))
    assert cancel.status_code == 404
    assert client.get("/v1/batches", **bearer(api_key)).json()["data"] == []
    theirs.refresh_from_db()
    assert theirs.status == "queued"


def test_rest_cancels_a_batch(client, api_key, tenant):
    batch = make_batch(tenant, ["a", "b"], api_key=api_key[0])
    response = client.post(f"/v1/batches/batch_{batch.id.hex}/cancel", **bearer(api_key))
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["request_counts"]["cancelled"] == 2


def test_a_batch_needs_a_key(client):
    assert client.post("/v1/batches", {}, content_type="application/json").status_code == 401


# --- giving way to drafts -------------------------------------------------------------------


def ask_for_a_draft(tenant):
    """A draft someone asked for in the admin, waiting for the worker. On a thread of its own:
    the engine's script runs inside the runner's event loop, where the ORM may not."""
    from chat.cached_replies import candidate_draft_start, candidate_record

    def ask():
        candidate = candidate_record(tenant=tenant, question="Wifi?", answer="guest")
        assert candidate is not None
        candidate_draft_start(candidate=candidate)

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()


def test_with_redis_a_runner_gives_its_batch_back_between_items_when_a_draft_waits(
    tenant, engine, monkeypatch, batch_dispatches
):
    monkeypatch.setattr("inference.service.engine_mode", lambda: "redis")

    def first(rid):
        ask_for_a_draft(tenant)  # asked while item 0 runs
        return [Delta(rid, "answer to zero"), Done(rid, "stop", 10, 4)]

    engine.script = {0: first}
    batch = make_batch(tenant, ["zero", "one", "two"])
    batch_dispatches.clear()

    # Item 0 ends as usual; the runner then gives the batch back instead of taking item 1, and
    # queues it again (behind the draft: the worker takes the interactive queue first).
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "yielded"
    assert statuses(batch) == ["done", "pending", "pending"]
    assert batch_dispatches == [batch.id]

    from chat.models import CachedReplyCandidate

    CachedReplyCandidate.objects.update(draft_status="ready")  # the worker wrote the draft
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "completed"
    assert statuses(batch) == ["done"] * 3
    assert [s.messages[-1].content for s in engine.submissions] == ["zero", "one", "two"]


def test_embedded_a_batch_does_not_give_way_drafts_run_on_their_own_threads(
    tenant, engine, monkeypatch
):
    monkeypatch.setattr("inference.service.engine_mode", lambda: "embedded")
    ask_for_a_draft(tenant)
    batch = make_batch(tenant, ["zero", "one"])
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "completed"


def test_a_draft_presumed_lost_holds_no_batch_back(tenant, engine, monkeypatch):
    from chat.models import CachedReplyCandidate

    monkeypatch.setattr("inference.service.engine_mode", lambda: "redis")
    ask_for_a_draft(tenant)
    CachedReplyCandidate.objects.update(draft_requested_at=timezone.now() - timedelta(minutes=11))
    batch = make_batch(tenant, ["zero", "one"])
    assert batches.batch_run(batch_id=batch.id, concurrency=1) == "completed"


# --- admin -----------------------------------------------------------------------------------


def client_for(user):
    c = Client()
    c.force_login(user)
    return c


def test_the_admin_lists_batches_with_progress_bars(admin_client, tenant, engine):
    batch = make_batch(tenant, ["a", "b", "c"], name="nightly")
    batch.items.filter(index=0).update(status="done")
    batch.items.filter(index=1).update(status="failed")
    page = admin_client.get(reverse("admin:chat_batch_changelist")).content.decode()
    assert '<progress max="3" value="2">' in page
    assert "1 / 3 done, 1 failed" in page
    assert "nightly" in page


def test_staff_submit_a_batch_and_download_its_results(tenant_admin, tenant, engine):
    client = client_for(tenant_admin)
    response = client.post(
        reverse("admin:chat_batch_submit"),
        {"tenant": tenant.pk, "name": "faq", "prompts": "What is VPN?\n\n年假怎么申请？\n"},
    )
    assert response.status_code == 302
    batch = Batch.objects.get()
    assert (batch.total, batch.created_by) == (2, tenant_admin)
    batches.batch_run(batch_id=batch.id)
    download = client.get(reverse("admin:chat_batch_results", args=[batch.pk]))
    rows = [json.loads(line) for line in b"".join(download.streaming_content).decode().splitlines()]
    assert [r["response"]["choices"][0]["message"]["content"] for r in rows] == [
        "answer to What is VPN?",
        "answer to 年假怎么申请？",
    ]


def test_a_tenant_admin_sees_and_cancels_only_their_batches(tenant_admin, tenant, other_tenant):
    ours, theirs = make_batch(tenant, ["a"]), make_batch(other_tenant, ["b"])
    client = client_for(tenant_admin)
    listing = client.get(reverse("admin:chat_batch_changelist"))
    assert [b.pk for b in listing.context["cl"].result_list] == [ours.pk]
    client.post(
        reverse("admin:chat_batch_changelist"),
        {"action": "cancel_selected", "_selected_action": [ours.pk, theirs.pk]},
    )
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert (ours.status, theirs.status) == ("cancelled", "queued")
    assert client.get(reverse("admin:chat_batch_results", args=[theirs.pk])).status_code == 404
    form = client.get(reverse("admin:chat_batch_submit")).context["form"]
    assert list(form.fields["tenant"].queryset) == [tenant]
