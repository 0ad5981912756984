"""Limits that hold on every surface: the REST API and the websocket refuse what a tenant's
limits do not allow, record why, and the counters come back to zero."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.db.models import Sum
from redis.backoff import NoBackoff
from redis.retry import Retry

from chat.models import ChatSession
from inference import metrics
from tenants.limits import Limiter, set_limiter
from tenants.models import ApiKey, Tenant, UsageRecord
from tenants.services import Principal, limits_plan
from tests import needs
from tests.chat.conftest import FakeEngine
from tests.chat.test_api import MODEL, ask, error_of, headers, post
from tests.chat.test_consumer import connected_as
from tests.chat.test_isolation import eventually
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def real_redis_limiter() -> Iterator[Limiter]:
    url = needs.redis_url()
    prefix = f"test-api-limits-{uuid.uuid4().hex[:10]}"
    limiter = Limiter(redis.Redis.from_url(url), prefix=prefix, lease_seconds=30)
    set_limiter(limiter)
    yield limiter
    set_limiter(None)
    for key in limiter.redis.scan_iter(f"{prefix}:*"):
        limiter.redis.delete(key)


async def set_limits(tenant: Tenant, **limits: int | None) -> None:
    for name, value in limits.items():
        setattr(tenant, name, value)
    await sync_to_async(tenant.save)()


async def test_fifty_requests_at_once_never_exceed_the_tokens_per_minute(
    use_engine: Any,
    real_redis_limiter: Limiter,
    api_key: tuple[ApiKey, str],
    tenant: Tenant,
) -> None:
    use_engine(FakeRunner(n_seq_max=4, step_delay=0.002))
    max_tokens = 24
    # The fake tokenizes "<user>question N\n<assistant>" as 28-29 tokens: a worst case of
    # ~52. 600 tokens a minute admit 11 of the 50.
    await set_limits(tenant, tokens_per_minute=600)

    async def one(i: int) -> tuple[int, str, Any]:
        body = ask(f"question {i:02d}", max_tokens=max_tokens, stream=i % 5 == 0)
        response = await post(api_key[1], body)
        if response.status_code != 200:
            return response.status_code, response.get("Retry-After", ""), error_of(response)
        if not body["stream"]:
            return 200, "", response.json()
        if i % 10 == 0:
            # Goes away after the first chunk: the generation is cancelled, and settled. (Read
            # as Django's ASGI handler reads a response, which closes what it read.)
            stream = aiter(response)
            await anext(stream)
            await stream.aclose()
            return 200, "", "cancelled"
        return 200, "", b"".join([c async for c in response.streaming_content])

    results = await asyncio.gather(*(one(i) for i in range(50)))

    refused = [r for r in results if r[0] != 200]
    served = [r for r in results if r[0] == 200]
    assert served, "some requests fit the limit"
    assert refused, "the limit refused the rest"
    for status, retry_after, error in refused:
        assert status == 429
        assert int(retry_after) >= 1
        assert error["code"] == "rate_limit_exceeded"
        assert "tokens per minute" in error["message"]

    records = UsageRecord.objects.filter(tenant=tenant).exclude(status=UsageRecord.Status.REJECTED)
    used = await sync_to_async(
        lambda: records.aggregate(t=Sum("prompt_tokens") + Sum("completion_tokens"))["t"]
    )()
    assert 0 < used <= 600
    rejected = await sync_to_async(
        UsageRecord.objects.filter(status=UsageRecord.Status.REJECTED).count
    )()
    assert rejected == len(refused)
    assert await sync_to_async(
        UsageRecord.objects.filter(reason="tokens_per_minute").count
    )() == len(refused)

    # Every request has ended: no stream slot or reservation is left open, and what stays in
    # the window is exactly what was used.
    principal = Principal(tenant=tenant, api_key=api_key[0])
    plan = await sync_to_async(limits_plan)(
        principal=principal, tenant=tenant, request_id="probe", tokens=0
    )
    for _ in range(50):  # a cancelled stream settles a moment after its client left
        snapshot = real_redis_limiter.snapshot(plan)
        if snapshot["open_reservations"] == 0:
            break
        await asyncio.sleep(0.05)
    assert snapshot["open_reservations"] == 0
    assert snapshot["streams"] == 0
    assert snapshot["principal_streams"] == 0
    assert snapshot["tokens_in_window"] == used


async def test_concurrent_streams_of_a_tenant_are_limited_on_rest_and_websocket_alike(
    use_engine: Any, api_key: tuple[ApiKey, str], tenant: Tenant, member: Any
) -> None:
    fake: FakeEngine = use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "z" * 200))
    await set_limits(tenant, max_concurrent_streams=1)
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "long one"})
    assert (await socket.receive_json_from(timeout=5))["type"] == "reply.start"

    response = await post(api_key[1], ask("me too"))
    assert response.status_code == 429
    assert "at once" in error_of(response)["message"]

    await socket.send_json_to({"type": "chat.stop"})
    while (await socket.receive_json_from(timeout=5))["type"] != "reply.done":
        pass
    assert (await post(api_key[1], ask("now?"))).status_code == 200
    await socket.disconnect()
    await eventually(lambda: bool(fake.runner.released))  # the stopped reply's sequence freed


async def test_a_spent_daily_quota_refuses_on_the_websocket_with_quota_exceeded(
    engine: FakeEngine, tenant: Tenant, member: Any
) -> None:
    await set_limits(tenant, daily_token_quota=50)
    await sync_to_async(UsageRecord.objects.create)(
        tenant=tenant, prompt_tokens=30, completion_tokens=15
    )
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "hello"})
    error = await socket.receive_json_from(timeout=5)
    assert error["code"] == "quota_exceeded"
    assert error["retry_after"] >= 1
    assert "daily quota of 50 tokens" in error["message"]
    assert await sync_to_async(ChatSession.objects.count)() == 0
    assert await sync_to_async(UsageRecord.objects.filter(reason="daily_token_quota").count)() == 1
    await socket.disconnect()


async def test_a_limit_changed_in_the_admin_applies_to_the_next_request(
    engine: FakeEngine, api_key: tuple[ApiKey, str], tenant: Tenant
) -> None:
    metrics.use_memory()
    await set_limits(tenant, requests_per_minute=1)
    assert (await post(api_key[1], ask("one"))).status_code == 200
    assert (await post(api_key[1], ask("two"))).status_code == 429
    # ... and /metrics counts the refusal by the limit's name and the tenant.
    assert metrics.refusal_counts() == {("requests_per_minute", "acme"): 1}
    await set_limits(tenant, requests_per_minute=5)
    assert (await post(api_key[1], ask("three"))).status_code == 200


async def test_usage_counts_prompt_and_completion_tokens_and_titles_too(
    use_engine: Any, tenant: Tenant, member: Any, settings: Any
) -> None:
    settings.QASSIST_GENERATE_TITLES = True
    # A title the title rules keep (short, in the question's language): the frame arrives.
    use_engine(FakeRunner(reply_for=lambda p: "Counting" if "title" in p else f"echo: {p}"))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "count me"})
    frames = []
    while True:
        frame = await socket.receive_json_from(timeout=5)
        frames.append(frame)
        if frame["type"] == "session.title":
            break
    done = next(f for f in frames if f["type"] == "reply.done")
    records = await sync_to_async(lambda: list(UsageRecord.objects.order_by("id")))()
    assert [r.reason for r in records] == ["", "background"]
    assert records[0].prompt_tokens == done["reply"]["prompt_tokens"] > 0
    assert records[0].completion_tokens == len("echo: count me")
    assert records[1].completion_tokens > 0  # the title's tokens are usage as well
    await socket.disconnect()


def test_the_refusal_names_the_limit_in_json(client: Any, api_key: tuple[ApiKey, str]) -> None:
    # (sync view test client: the 429 body is the same for every client)
    tenant = api_key[0].tenant
    tenant.requests_per_minute = 0
    tenant.save()
    response = client.post(
        "/v1/chat/completions",
        data=json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}),
        content_type="application/json",
        headers=headers(api_key[1]),
    )
    assert response.status_code == 429
    assert response.json()["error"]["type"] == "requests"
    assert "0 requests per minute" in response.json()["error"]["message"]


async def test_limit_counters_out_of_reach_refuse_clearly_on_both_surfaces(
    engine: FakeEngine, api_key: tuple[ApiKey, str], member: Any
) -> None:
    unreachable = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    set_limiter(Limiter(unreachable, prefix="nowhere"))
    try:
        response = await post(api_key[1], ask("anyone?"))
        assert response.status_code == 503
        assert error_of(response)["code"] == "unavailable"
        assert response["Retry-After"] == "5"
        socket = await connected_as(member)
        await socket.send_json_to({"type": "chat.send", "session": None, "content": "hi"})
        error = await socket.receive_json_from(timeout=5)
        assert (error["code"], error["retry_after"]) == ("unavailable", 5)
        await socket.disconnect()
    finally:
        set_limiter(None)
    assert await sync_to_async(ChatSession.objects.count)() == 0
