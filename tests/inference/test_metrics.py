"""`GET /metrics` and the staff status page, with the fake runner behind an embedded client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from inference import metrics
from inference.local import LocalEngineClient
from inference.service import set_engine_client
from inference.types import ChatMessage, Done, SamplingParams
from inference.worker import Submission
from tests.fakes import FakeRunner, make_engine

pytestmark = pytest.mark.django_db


@pytest.fixture
def engine_client() -> Iterator[LocalEngineClient]:
    metrics.use_memory()
    client = LocalEngineClient(lambda: make_engine(FakeRunner(n_seq_max=2)))
    set_engine_client(client)
    yield client
    client.stop()
    set_engine_client(None)
    metrics.use_memory()


def ask(client: LocalEngineClient, text: str, tenant: str) -> list[Any]:
    sub = Submission(
        f"r-{tenant}-{text}",
        (ChatMessage("user", text),),
        SamplingParams(temperature=0),
        tenant=tenant,
    )

    async def run() -> list[Any]:
        return [e async for e in client.generate(sub)]

    return asyncio.run(run())


def scrape(client: Client, **extra: Any) -> dict[str, Any]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def value(families: dict[str, Any], name: str, sample: str, **labels: str) -> float:
    for s in families[name].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {sample} {labels}")


def test_metrics_parse_and_count_what_the_engine_did(
    client: Client, engine_client: LocalEngineClient
) -> None:
    events = ask(engine_client, "hello", tenant="acme")
    done = events[-1]
    assert isinstance(done, Done)
    ask(engine_client, "again", tenant="globex")
    assert engine_client.worker is not None
    engine_client.worker.maybe_heartbeat(force=True)
    metrics.record_refusal(reason="rate_limited", tenant="acme")
    metrics.record_refusal(reason="rate_limited", tenant="acme")

    families = scrape(client)
    assert value(families, "qassist_workers", "qassist_workers") == 1
    generated = value(families, "qassist_tokens_generated", "qassist_tokens_generated_total")
    assert generated == done.completion_tokens + 1 + len(b"echo: again") + 1  # with end tokens
    assert value(families, "qassist_requests", "qassist_requests_total", tenant="acme") == 1
    assert value(families, "qassist_requests", "qassist_requests_total", tenant="globex") == 1
    assert (
        value(
            families, "qassist_requests_finished", "qassist_requests_finished_total", reason="stop"
        )
        == 2
    )
    ttft_count = value(
        families, "qassist_time_to_first_token_seconds", "qassist_time_to_first_token_seconds_count"
    )
    assert ttft_count == 2
    inf_bucket = value(
        families,
        "qassist_inter_token_seconds",
        "qassist_inter_token_seconds_bucket",
        le="+Inf",
    )
    assert inf_bucket == generated - 2  # every token but each request's first
    assert value(families, "qassist_queue_wait_seconds", "qassist_queue_wait_seconds_count") == 2
    assert value(families, "qassist_sequences", "qassist_sequences") == 2
    assert value(families, "qassist_requests_running", "qassist_requests_running") == 0
    assert (
        value(
            families,
            "qassist_refusals",
            "qassist_refusals_total",
            reason="rate_limited",
            tenant="acme",
        )
        == 2
    )
    for name in (
        "qassist_tokens_prefilled",
        "qassist_tokens_reused",
        "qassist_tokens_restored",
        "qassist_host_cache_bytes",
        "qassist_batch_tokens",
        "qassist_engine_errors",
    ):
        assert name in families


def test_metrics_are_refused_to_an_anonymous_remote_caller(
    client: Client, engine_client: LocalEngineClient
) -> None:
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_staff_may_read_metrics_from_anywhere(
    client: Client, engine_client: LocalEngineClient
) -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    assert "qassist_workers" in scrape(client, REMOTE_ADDR="203.0.113.9")


def test_a_configured_network_may_read_metrics(
    client: Client, engine_client: LocalEngineClient, settings: Any
) -> None:
    settings.QASSIST_METRICS_NETWORKS = ["203.0.113.0/24"]
    assert "qassist_workers" in scrape(client, REMOTE_ADDR="203.0.113.9")


def test_metrics_without_any_worker_still_parse(client: Client) -> None:
    class NoWorker:
        def at_capacity(self) -> bool:
            return False  # its refusals come from the engine path

        async def health(self) -> dict[str, Any]:
            return {"mode": "redis", "ok": False, "workers": [], "queued": 4}

    set_engine_client(NoWorker())  # type: ignore[arg-type]
    try:
        families = scrape(client)
    finally:
        set_engine_client(None)
    assert value(families, "qassist_workers", "qassist_workers") == 0
    assert value(families, "qassist_shared_queue_requests", "qassist_shared_queue_requests") == 4


def test_the_status_page_shows_staff_the_live_numbers(
    client: Client, engine_client: LocalEngineClient
) -> None:
    ask(engine_client, "hello", tenant="acme")
    assert engine_client.worker is not None
    engine_client.worker.maybe_heartbeat(force=True)
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    response = client.get("/admin/engine/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Inference engine" in page
    assert "/ 2</td>" in page  # sequences in use out of 2
    data = client.get("/admin/engine/?format=json").json()
    assert data["ok"] is True
    assert data["workers"][0]["generated"] == len(b"echo: hello") + 1


def test_the_status_page_is_for_staff_only(client: Client, member: User) -> None:
    client.force_login(member)
    response = client.get("/admin/engine/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_the_admin_index_links_to_the_status_page(client: Client) -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert 'href="/admin/engine/"' in page
    assert "Run qassist" in page  # the admin index (qassist/admin_site.py), Engine section


class Yielded:
    """An engine client whose one worker's floor has yielded (its heartbeat snapshot)."""

    def at_capacity(self) -> bool:
        return False

    async def health(self) -> dict[str, Any]:
        worker = {
            "id": "w1",
            "running": 27,
            "waiting": 3,
            "running_limit": 27,
            "floor_limit": 11,
            "floor_yielding": 1,
            "floor_yields": 4,
            "floor_yielded_seconds": 93.5,
            "oldest_wait_seconds": 2.4,
        }
        return {"mode": "redis", "ok": True, "workers": [worker], "queued": 2}


def test_metrics_show_the_running_limit_the_oldest_wait_and_the_floors_yields(
    client: Client,
) -> None:
    set_engine_client(Yielded())  # type: ignore[arg-type]
    try:
        families = scrape(client)
    finally:
        set_engine_client(None)
    assert value(families, "qassist_running_limit", "qassist_running_limit", worker="w1") == 27
    assert value(families, "qassist_floor_limit", "qassist_floor_limit", worker="w1") == 11
    assert value(families, "qassist_floor_yielding", "qassist_floor_yielding") == 1
    assert value(families, "qassist_oldest_wait_seconds", "qassist_oldest_wait_seconds") == 2.4
    assert value(families, "qassist_floor_yields", "qassist_floor_yields_total") == 4
    assert (
        value(families, "qassist_floor_yielded_seconds", "qassist_floor_yielded_seconds_total")
        == 93.5
    )


def test_the_status_page_shows_the_limit_the_oldest_wait_and_the_floors_yields(
    client: Client,
) -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    set_engine_client(Yielded())  # type: ignore[arg-type]
    try:
        page = client.get("/admin/engine/").content.decode()
        data = client.get("/admin/engine/?format=json").json()
    finally:
        set_engine_client(None)
    assert "27 (yielded: the floor's is 11)" in page
    assert "<td>2.4 s</td>" in page
    assert "4 times, 93.5 s" in page
    [worker] = data["workers"]
    assert worker["running_limit"] == 27
    assert worker["oldest_wait"] == 2.4
    assert worker["floor_yields"] == 4
    assert worker["floor_yielding"] is True


# --- behind a proxy, and whose tenants -----------------------------------------------------------

PROXIED = [
    {"X-Forwarded-For": "8.8.8.8"},
    {"X-Forwarded-For": "127.0.0.1"},  # what a client wrote, passed on by the proxy
    {"Forwarded": "for=8.8.8.8;proto=https"},
    {"X-Real-IP": "8.8.8.8"},
]


@pytest.mark.parametrize("headers", PROXIED)
def test_a_request_relayed_by_a_local_proxy_is_its_forwarded_client(
    client: Client, engine_client: LocalEngineClient, headers: dict[str, str]
) -> None:
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "qassist_" not in response.content.decode()


@pytest.mark.parametrize("headers", PROXIED)
def test_a_proxy_inside_a_configured_network_does_not_admit_its_clients(
    client: Client, engine_client: LocalEngineClient, settings: Any, headers: dict[str, str]
) -> None:
    settings.QASSIST_METRICS_NETWORKS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.2", headers=headers).status_code == 403
    assert "qassist_workers" in scrape(client, REMOTE_ADDR="10.0.0.2")  # direct: allowed


def test_staff_behind_the_proxy_still_read_metrics(
    client: Client, engine_client: LocalEngineClient
) -> None:
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    assert "qassist_workers" in scrape(
        client, REMOTE_ADDR="127.0.0.1", headers={"X-Forwarded-For": "8.8.8.8"}
    )


def tenant_labels(families: dict[str, Any], name: str) -> set[str]:
    return {s.labels["tenant"] for s in families[name].samples if "tenant" in s.labels}


def test_a_tenant_admin_reads_only_their_own_tenants_series(
    client: Client, engine_client: LocalEngineClient, tenant_admin: User, other_tenant: Any
) -> None:
    ask(engine_client, "hello", tenant="acme")
    ask(engine_client, "hello", tenant="globex")
    assert engine_client.worker is not None
    engine_client.worker.maybe_heartbeat(force=True)
    metrics.record_refusal(reason="rate_limited", tenant="acme")
    metrics.record_refusal(reason="quota_exceeded", tenant="globex")

    client.force_login(tenant_admin)
    families = scrape(client, REMOTE_ADDR="203.0.113.9")
    assert tenant_labels(families, "qassist_requests") == {"acme"}
    assert tenant_labels(families, "qassist_refusals") == {"acme"}
    assert "globex" not in client.get("/metrics", REMOTE_ADDR="203.0.113.9").content.decode()

    client.force_login(User.objects.create_superuser("root", password="pw"))
    families = scrape(client, REMOTE_ADDR="203.0.113.9")
    assert tenant_labels(families, "qassist_requests") == {"acme", "globex"}
    assert tenant_labels(families, "qassist_refusals") == {"acme", "globex"}
    # The monitoring host sees every tenant's too.
    client.logout()
    assert tenant_labels(scrape(client), "qassist_refusals") == {"acme", "globex"}


def test_the_engine_page_shows_a_tenant_admin_only_their_tenants_refusals(
    client: Client, engine_client: LocalEngineClient, tenant_admin: User, other_admin: User
) -> None:
    metrics.record_refusal(reason="rate_limited", tenant="acme")
    metrics.record_refusal(reason="quota_exceeded", tenant="globex")

    client.force_login(tenant_admin)
    data = client.get("/admin/engine/?format=json").json()
    assert data["refusals"] == [[["rate_limited", "acme"], 1]]
    assert "globex" not in client.get("/admin/engine/").content.decode()

    client.force_login(other_admin)
    assert client.get("/admin/engine/?format=json").json()["refusals"] == [
        [["quota_exceeded", "globex"], 1]
    ]

    client.force_login(User.objects.create_superuser("root", password="pw"))
    refusals = client.get("/admin/engine/?format=json").json()["refusals"]
    assert [reason_tenant for reason_tenant, _ in refusals] == [
        ["quota_exceeded", "globex"],
        ["rate_limited", "acme"],
    ]
