"""Redis restarts under a running worker and web client: in-flight requests fail clearly, both
sides reconnect by themselves, and new requests succeed again.

Runs its own redis-server on a free port (never the shared one), without persistence, so a
restart is a real loss of every key, as after a crash."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from inference.transport import RedisEngineClient, RedisWorkerTransport
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from inference.worker import EngineWorker, Submission
from tests import needs
from tests.fakes import FakeRunner, make_engine

pytestmark = pytest.mark.redis

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert REDIS_SERVER is not None
        # Fixed arguments: the system's redis-server on a port of our own, no persistence.
        self.process = subprocess.Popen(  # noqa: S603
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # a crash, not a clean shutdown
            self.process.wait()
            self.process = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if REDIS_SERVER is None:
        needs.missing("redis-server is not installed: sudo apt-get install redis-server")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def sub(text: str) -> Submission:
    return Submission(uuid.uuid4().hex, (ChatMessage("user", text),), SamplingParams(temperature=0))


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(30):  # generous: a liveness bound, not a speed check
            while not condition():  # noqa: ASYNC110  (a worker thread's state: no event)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"gave up waiting for {what}") from None


async def collect(client: RedisEngineClient, submission: Submission) -> list[object]:
    return [e async for e in client.generate(submission)]


async def test_after_a_redis_restart_in_flight_requests_fail_clearly_and_new_ones_succeed(
    private_redis: PrivateRedis,
) -> None:
    runner = FakeRunner(step_delay=0.02, reply_for=lambda p: "s" * 3000 if p == "long" else "ok")
    transport = RedisWorkerTransport(private_redis.url, prefix="restart")
    worker = EngineWorker(make_engine(runner), transport, idle_wait=0.05)
    worker.maybe_heartbeat(force=True)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    client = RedisEngineClient(
        private_redis.url, prefix="restart", heartbeat_timeout=2.0, poll_seconds=0.2
    )
    try:
        before = await collect(client, sub("short"))
        assert isinstance(before[-1], Done)

        # A long reply streams; Redis dies under it.
        events: list[object] = []
        async for event in client.generate(sub("long")):
            events.append(event)
            if len(events) == 3:
                private_redis.stop()
        last = events[-1]
        assert isinstance(last, Failed), last
        assert last.code == "worker_down"
        assert "Redis" in last.message
        assert any(isinstance(e, Delta) for e in events)

        # While Redis is down a new request fails at once, clearly, without an exception.
        [down] = await collect(client, sub("short"))
        assert isinstance(down, Failed)
        assert down.code == "worker_down"

        # The worker ends what it was generating: nobody can receive it any more.
        await wait_until(lambda: worker.engine.num_running == 0, "the worker to end it")
        assert thread.is_alive()

        # Redis comes back empty. Neither side is restarted: they reconnect by themselves.
        private_redis.start()
        result: list[object] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = await collect(client, sub("short"))
            if isinstance(result[-1], Done):
                break
            await asyncio.sleep(0.2)
        assert isinstance(result[-1], Done), result
        assert "".join(e.text for e in result if isinstance(e, Delta)) == "ok"

        # Cancellation (pub/sub) works again too: the worker resubscribed.
        long_sub = sub("long")
        got: list[object] = []
        async for event in client.generate(long_sub):
            got.append(event)
            if isinstance(event, Delta) and len(got) == 2:
                await client.cancel(long_sub.request_id)
        last = got[-1]
        assert isinstance(last, Done)
        assert last.finish_reason == "cancelled"
    finally:
        worker.stop_event.set()
        thread.join(10)
        transport.close()


@pytest.mark.django_db(transaction=True)
async def test_an_open_chat_socket_survives_a_redis_restart_and_chats_on(
    private_redis: PrivateRedis, member: Any, tenant: Any, settings: Any
) -> None:
    """Through the real ASGI application, with the channel layer and the tenant limits on the
    restarting Redis too: the reply in flight must still end for its client even though its
    limits cannot be settled."""
    from inference.service import set_engine_client
    from tenants.limits import Limiter, set_limiter
    from tests.chat.test_consumer import connected_as, joined, of, until_done

    set_limiter(  # put back by the autouse fixture fresh_limits
        Limiter(
            redis.Redis.from_url(private_redis.url, socket_timeout=2, socket_connect_timeout=2),
            prefix="restart-limits",
        )
    )

    settings.REDIS_URL = private_redis.url
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [private_redis.url], "prefix": "restart:layer"},
        }
    }
    runner = FakeRunner(step_delay=0.02, reply_for=lambda p: "s" * 3000 if p == "long" else "ok")
    transport = RedisWorkerTransport(private_redis.url, prefix="restart")
    worker = EngineWorker(make_engine(runner), transport, idle_wait=0.05)
    worker.maybe_heartbeat(force=True)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    set_engine_client(RedisEngineClient(private_redis.url, prefix="restart", heartbeat_timeout=2.0))
    try:
        socket = await connected_as(member)
        await socket.send_json_to({"type": "chat.send", "session": None, "content": "long"})
        start = await socket.receive_json_from(timeout=5)
        assert (await socket.receive_json_from(timeout=5))["type"] == "delta"
        private_redis.stop()
        frames = await until_done(socket, wait=30)
        assert [f["code"] for f in of(frames, "error")] == ["worker_down"]
        assert frames[-1]["reply"]["status"] == "interrupted"

        private_redis.start()
        session = start["session"]["id"]
        for _ in range(100):  # until the worker's heartbeat is back in the new Redis
            await socket.send_json_to({"type": "chat.send", "session": session, "content": "hi"})
            frames = await until_done(socket, wait=30)
            if frames[-1]["reply"]["status"] == "complete":
                break
            await asyncio.sleep(0.2)
        assert frames[-1]["reply"]["status"] == "complete"
        assert joined(frames) == "ok"
        await socket.disconnect()
    finally:
        set_engine_client(None)
        worker.stop_event.set()
        thread.join(10)
        transport.close()
