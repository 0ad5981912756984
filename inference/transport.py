"""Web processes and inference workers talk through Redis.

- Queue: a sorted set `{p}:queue` (score = priority, then arrival) shared by every worker; the
  request body waits in `{p}:req:{id}`. Admission is one Lua script: when the queue is full the
  client hears "busy" at once. A worker pops only as many requests as it can start now, so the
  queue stays global and a second machine's worker takes what the first cannot.
- Events: each request has its own Redis stream `{p}:ev:{id}`. Streams keep what was written until
  read (unlike pub/sub), so a reader that starts late misses nothing.
- Cancel: `{p}:cancel` pub/sub; a request still queued is simply removed from the queue.
- Liveness: each worker scores itself in `{p}:workers` every second and names itself as the owner
  of the requests it takes (`{p}:owner:{id}`). A reader that hears nothing checks the owner's
  heartbeat and fails the request with `worker_down` instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar, cast

import redis
import redis.asyncio as aioredis

from inference.types import (
    Done,
    ErrorCode,
    Event,
    Failed,
    FinishReason,
    Queued,
    event_from_dict,
    event_to_dict,
)
from inference.worker import Submission, TransportUnavailable

logger = logging.getLogger(__name__)

EVENT_TTL = 600  # seconds a request's events and body are kept
# What redis-py raises while Redis is down or restarting (both sides retry by themselves).
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
REDIS_DOWN_MESSAGE = (
    "The connection to the inference workers (Redis) was lost; try again in a few seconds."
)
_SCORE_PRIORITY = 10**13  # arrival in ms stays below this for centuries

_ENQUEUE = """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return -1 end
redis.call('SET', KEYS[2], ARGV[4], 'EX', tonumber(ARGV[5]))
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return redis.call('ZRANK', KEYS[1], ARGV[3])
"""


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.queue = f"{prefix}:queue"
        self.cancel = f"{prefix}:cancel"
        self.workers = f"{prefix}:workers"

    def body(self, request_id: str) -> str:
        return f"{self.prefix}:req:{request_id}"

    def events(self, request_id: str) -> str:
        return f"{self.prefix}:ev:{request_id}"

    def owner(self, request_id: str) -> str:
        return f"{self.prefix}:owner:{request_id}"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:worker:{worker_id}"


def queue_score(priority: int, submitted_at: float) -> int:
    return -priority * _SCORE_PRIORITY + int(submitted_at * 1000)


F = TypeVar("F", bound=Callable[..., Any])


def _unavailable_when_redis_is_down(method: F) -> F:
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except REDIS_DOWN as exc:
            raise TransportUnavailable(f"Redis unreachable: {exc}") from exc

    return cast(F, wrapped)


class RedisWorkerTransport:
    """The worker's side: sync redis-py, called from the engine loop. Redis unreachable is
    reported as TransportUnavailable; the next call reconnects (the cancel subscription too)."""

    shared_queue = True

    def __init__(self, url: str, *, prefix: str = "qassist", worker_id: str | None = None) -> None:
        # Any: redis-py types replies as unions over its decode modes; this client returns bytes.
        self.redis: Any = cast(Any, redis.Redis.from_url(url))
        self.keys = Keys(prefix)
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self._pubsub.subscribe(self.keys.cancel)

    @_unavailable_when_redis_is_down
    def fetch(self, limit: int, timeout: float) -> Sequence[Submission]:
        popped: list[tuple[bytes, float]] = []
        if timeout > 0:
            got = self.redis.bzpopmin(self.keys.queue, timeout=timeout)
            if got is None:
                return []
            popped.append((got[1], got[2]))
            limit -= 1
        if limit > 0:
            popped.extend(self.redis.zpopmin(self.keys.queue, limit))
        if not popped:
            return []
        ids = [member.decode() for member, _ in popped]
        pipe = self.redis.pipeline()
        for request_id in ids:
            pipe.set(self.keys.owner(request_id), self.worker_id, ex=EVENT_TTL)
            pipe.get(self.keys.body(request_id))
        replies = pipe.execute()
        subs = []
        for request_id, body in zip(ids, replies[1::2], strict=True):
            if body is None:  # its client gave up long ago
                continue
            try:
                subs.append(Submission.from_dict(json.loads(body)))
            except (ValueError, KeyError, TypeError) as exc:
                self.publish(
                    [Failed(request_id, ErrorCode.INVALID_REQUEST.value, f"bad request: {exc}")]
                )
        return subs

    @_unavailable_when_redis_is_down
    def cancellations(self) -> Sequence[str]:
        ids: list[str] = []
        while True:
            message = self._pubsub.get_message(timeout=0.0)
            if message is None:
                return ids
            ids.append(message["data"].decode())

    @_unavailable_when_redis_is_down
    def publish(self, events: Sequence[Event]) -> None:
        if not events:
            return
        pipe = self.redis.pipeline(transaction=False)
        for event in events:
            key = self.keys.events(event.request_id)
            pipe.xadd(key, {"e": json.dumps(event_to_dict(event), ensure_ascii=False)})
            pipe.expire(key, EVENT_TTL)
        pipe.execute()

    @_unavailable_when_redis_is_down
    def heartbeat(self, stats: dict[str, Any]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.workers, {self.worker_id: time.time()})
        pipe.set(self.keys.worker(self.worker_id), json.dumps(stats), ex=30)
        pipe.execute()

    def retire(self) -> None:
        """Leave the pool at once on a clean exit, rather than after the heartbeat goes stale."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers, self.worker_id)
        pipe.delete(self.keys.worker(self.worker_id))
        pipe.execute()

    def close(self) -> None:
        self._pubsub.close()
        self.redis.close()


class RedisEngineClient:
    """The web side: submit a request and iterate over its events (redis.asyncio)."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "qassist",
        max_queue: int = 64,
        heartbeat_timeout: float = 5.0,
        poll_seconds: float = 1.0,
    ) -> None:
        self.url = url
        self.keys = Keys(prefix)
        self.max_queue = max_queue
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_ms = int(poll_seconds * 1000)
        self._redis: Any = None  # see RedisWorkerTransport.redis
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def redis(self) -> Any:
        # A connection pool belongs to one event loop; tests and sync callers make new loops.
        loop = asyncio.get_running_loop()
        if self._redis is None or self._loop is not loop:
            self._redis = aioredis.Redis.from_url(self.url)
            self._loop = loop
        return self._redis

    async def live_workers(self) -> list[str]:
        cutoff = time.time() - self.heartbeat_timeout
        members = await self.redis.zrangebyscore(self.keys.workers, cutoff, "+inf")
        return [m.decode() for m in members]

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        """Events of one request until it is done or failed; closing early cancels it.

        Redis unreachable (restarting, say) ends the request with `worker_down` and a clear
        message rather than an exception; redis-py reconnects by itself on the next request."""
        finished = False
        try:
            try:
                async for event in self._generate(sub):
                    if isinstance(event, Done | Failed):
                        finished = True
                    yield event
            except REDIS_DOWN as exc:
                finished = True
                logger.warning("request %s: Redis unreachable: %s", sub.request_id, exc)
                yield Failed(sub.request_id, ErrorCode.WORKER_DOWN.value, REDIS_DOWN_MESSAGE)
        finally:
            if not finished:
                with contextlib.suppress(*REDIS_DOWN):
                    await asyncio.shield(self.cancel(sub.request_id))

    async def _generate(self, sub: Submission) -> AsyncIterator[Event]:
        rid = sub.request_id
        if not await self.live_workers():
            yield Failed(rid, ErrorCode.WORKER_DOWN.value, "No inference worker is running.")
            return
        body = json.dumps(sub.to_dict(), ensure_ascii=False)
        rank = await self.redis.eval(
            _ENQUEUE,
            2,
            self.keys.queue,
            self.keys.body(rid),
            self.max_queue,
            queue_score(sub.priority, sub.submitted_at),
            rid,
            body,
            EVENT_TTL,
        )
        if int(rank) < 0:
            yield Failed(
                rid,
                ErrorCode.BUSY.value,
                "The assistant is at capacity; try again shortly.",
                retry_after=5.0,
            )
            return
        last_id = "0-0"
        position = 0  # told only if it is still waiting after a poll: most start at once
        unowned_polls = 0
        events_key = self.keys.events(rid)
        while True:
            reply = await self.redis.xread({events_key: last_id}, block=self.poll_ms, count=100)
            if reply:
                for entry_id, fields in reply[0][1]:
                    last_id = entry_id
                    event = event_from_dict(json.loads(fields[b"e"]))
                    yield event
                    if isinstance(event, Done | Failed):
                        await self.redis.delete(events_key, self.keys.owner(rid))
                        return
                continue
            # Nothing heard for a while: is it still queued, and is its worker alive?
            live = await self.live_workers()
            rank = await self.redis.zrank(self.keys.queue, rid)
            if rank is not None:
                if not live:
                    await self.redis.zrem(self.keys.queue, rid)
                    yield Failed(
                        rid, ErrorCode.WORKER_DOWN.value, "No inference worker is running."
                    )
                    return
                if rank + 1 != position:
                    position = rank + 1
                    yield Queued(rid, position)
                continue
            owner = await self.redis.get(self.keys.owner(rid))
            unowned_polls = 0 if owner is not None else unowned_polls + 1
            if (owner is not None and owner.decode() not in live) or unowned_polls >= 3:
                yield Failed(
                    rid,
                    ErrorCode.WORKER_DOWN.value,
                    "The inference worker stopped while generating this reply.",
                )
                return

    async def cancel(self, request_id: str) -> None:
        """Stop a request: still queued, it leaves the queue; running, its worker frees it."""
        if await self.redis.zrem(self.keys.queue, request_id):
            event = Done(request_id, FinishReason.CANCELLED.value, 0, 0)
            key = self.keys.events(request_id)
            await self.redis.delete(self.keys.body(request_id))
            await self.redis.xadd(key, {"e": json.dumps(event_to_dict(event))})
            await self.redis.expire(key, EVENT_TTL)
            return
        await self.redis.publish(self.keys.cancel, request_id)

    async def health(self) -> dict[str, Any]:
        live = await self.live_workers()
        stats = []
        for worker_id in live:
            raw = await self.redis.get(self.keys.worker(worker_id))
            if raw:
                stats.append({"id": worker_id, **json.loads(raw)})
        return {
            "mode": "redis",
            "ok": bool(live),
            "workers": stats,
            "queued": await self.redis.zcard(self.keys.queue),
        }
