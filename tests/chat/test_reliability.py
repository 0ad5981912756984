"""Replies that lose their worker or wait long: through the websocket consumer.

The worker-death tests use a real Redis (the transport of a Redis-mode deployment) and an
inference worker on a thread over the fake runner; the worker "dies" by stopping its loop
without retiring, exactly what a kill -9 leaves behind: a heartbeat that stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.utils import timezone

from chat.models import Message
from chat.services import replies
from chat.services.replies import STALE_STREAM_SECONDS, replies_interrupt_stale
from inference.service import set_engine_client
from inference.transport import RedisEngineClient
from tenants.models import Tenant
from tests.chat.conftest import FakeEngine
from tests.chat.test_consumer import connected_as, joined, of, stored, until_done
from tests.fakes import FakeRunner
from tests.inference.test_transport_redis import REDIS_URL, WorkerThread, prefix

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["prefix"]  # a fixture used here


@pytest.mark.redis
async def test_a_reply_cut_by_a_dead_worker_is_interrupted_with_its_text_kept_then_chat_recovers(
    prefix: str, member: User, tenant: Tenant
) -> None:
    client = RedisEngineClient(REDIS_URL, prefix=prefix, heartbeat_timeout=1.0, poll_seconds=0.2)
    set_engine_client(client)
    worker = WorkerThread(prefix, FakeRunner(step_delay=0.02, reply_for=lambda _: "s" * 2000))
    worker.__enter__()
    try:
        socket = await connected_as(member)
        await socket.send_json_to({"type": "chat.send", "session": None, "content": "go"})
        start = await socket.receive_json_from(timeout=5)
        assert start["type"] == "reply.start"
        first = await socket.receive_json_from(timeout=5)
        assert first["type"] == "delta"

        # kill -9: the loop stops, nothing is drained or retired, the heartbeat just stops.
        worker.worker.stop_event.set()
        worker.thread.join(5)
        worker.transport.close()

        frames = [first, *await until_done(socket, wait=15)]
        errors = of(frames, "error")
        assert [e["code"] for e in errors] == ["worker_down"]
        done = frames[-1]["reply"]
        assert done["status"] == "interrupted"
        streamed = joined(frames)
        assert streamed
        assert done["content"] == streamed
        message = await stored(done["id"])
        assert message.status == Message.Status.INTERRUPTED
        assert message.content == streamed

        # The supervisor starts the worker again: the same page chats on, nothing to reload.
        with WorkerThread(prefix, FakeRunner()):
            frames = await _ask(socket, "again", start["session"]["id"])
        assert frames[-1]["reply"]["status"] == "complete"
        assert joined(frames) == "echo: again"
        await socket.disconnect()
    finally:
        set_engine_client(None)
        if worker.thread.is_alive():
            worker.__exit__()


async def _ask(socket: WebsocketCommunicator, content: str, session: str) -> list[dict[str, Any]]:
    await socket.send_json_to({"type": "chat.send", "session": session, "content": content})
    return await until_done(socket)


async def test_a_reply_waiting_in_the_queue_is_kept_alive_so_the_sweep_leaves_it_alone(
    use_engine: Callable[..., FakeEngine],
    member: User,
    owner: User,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replies, "REPLY_KEEPALIVE_SECONDS", 0.05)
    script = {"first": "w" * 400, "second": "then me"}
    use_engine(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=script.__getitem__))
    first, second = await connected_as(member), await connected_as(owner)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    await first.receive_json_from(timeout=5)  # reply.start
    await first.receive_json_from(timeout=5)  # a delta: the only sequence is taken

    await second.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    start = await second.receive_json_from(timeout=5)
    assert (await second.receive_json_from(timeout=5))["type"] == "queued"
    reply_id = start["reply"]["id"]

    @database_sync_to_async
    def age() -> None:
        long_ago = timezone.now() - timedelta(seconds=STALE_STREAM_SECONDS + 30)
        Message.objects.filter(id=reply_id).update(updated_at=long_ago)

    await age()
    # Still waiting: the keepalive touches it again before the sweep looks.
    await _wait_until_touched(reply_id)
    swept = await database_sync_to_async(replies_interrupt_stale)()
    assert swept == 0
    assert (await stored(reply_id)).status == Message.Status.STREAMING

    await first.send_json_to({"type": "chat.stop"})
    await until_done(first)
    frames = await until_done(second)
    assert frames[-1]["reply"]["status"] == "complete"
    await first.disconnect()
    await second.disconnect()


async def _wait_until_touched(reply_id: int) -> None:
    threshold = timedelta(seconds=STALE_STREAM_SECONDS)
    for _ in range(200):
        message = await stored(reply_id)
        if message.updated_at > timezone.now() - threshold:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the waiting reply was never touched")


async def test_a_rest_reply_waiting_and_streaming_is_kept_alive_too(
    use_engine: Callable[..., FakeEngine],
    api_key: Any,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The REST API writes a reply's text only at the end: without the keepalive, a long one
    would look orphaned to the sweep while it is still being generated."""
    from tests.chat.test_api import ask, post

    monkeypatch.setattr(replies, "REPLY_KEEPALIVE_SECONDS", 0.05)
    engine = use_engine(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=lambda _: "z" * 300))
    response = await post(api_key[1], ask("long", stream=True))
    assert response.status_code == 200
    stream = response.streaming_content
    await anext(stream)  # generation under way

    reply_id = await database_sync_to_async(
        lambda: Message.objects.get(role=Message.Role.ASSISTANT, status="streaming").id
    )()
    long_ago = timezone.now() - timedelta(seconds=STALE_STREAM_SECONDS + 30)
    await database_sync_to_async(Message.objects.filter(id=reply_id).update)(updated_at=long_ago)
    await _wait_until_touched(reply_id)
    assert await database_sync_to_async(replies_interrupt_stale)() == 0

    rest = b"".join([chunk async for chunk in stream])
    assert b"[DONE]" in rest
    assert (await stored(reply_id)).status == Message.Status.COMPLETE
    assert engine.runner.batches
