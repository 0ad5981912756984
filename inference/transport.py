"""Web processes and inference workers talk through Redis.

- Queue: a sorted set `{p}:queue` (score = arrival) shared by every worker; the request body
  waits in `{p}:req:{id}` and what the fair-share policy needs (tenant, weight, follow-up,
  background) in the hash `{p}:meta`. Admission is one Lua script: when the queue is full the
  client hears "busy" at once. A worker takes only as many requests as it can start now, so the
  queue stays global and a second machine's worker takes what the first cannot.
- Order: the same weighted fair share as the engine's own queue (`inference.fairshare`), with
  the tenants' virtual times kept in Redis (`{p}:fair`). A worker reads the queue, computes the
  order, and claims requests in that order with a Lua script that removes the request and
  charges its tenant in one step; a request another worker claimed first is skipped. So several
  workers follow one order. An idle worker blocks on `{p}:bell`, which each enqueue rings.
- Balance: each fetch records how many requests the worker holds (`{p}:loads`); a worker
  holding more than another live one leaves a new request to it for BALANCE_SECONDS, and a
  conversation's next turn to the worker holding its history for the affinity window.
- Wait bound: a client whose request is still queued after `max_wait` seconds takes it out of
  the queue (if no worker claimed it meanwhile) and answers "busy".
- Events: each request has its own Redis stream `{p}:ev:{id}`. Streams keep what was written until
  read (unlike pub/sub), so a reader that starts late misses nothing.
- Cancel: `{p}:cancel` pub/sub; a request still queued is simply removed from the queue.
- Liveness: each worker scores itself in `{p}:workers` every second and names itself as the owner
  of the requests it takes (`{p}:owner:{id}`). A reader that hears nothing checks the owner's
  heartbeat and fails the request with `worker_down` instead of waiting forever.
- Models (issue #36): each worker serves one model. The queue, its policy's state, the bell,
  the loads and the live workers are kept per model (`{p}:queue:{model}`, ...), so a worker
  claims only its own model's requests and the balance is between workers of one model. A
  request for a model no live worker serves is failed with `worker_down` naming the model
  before it is queued. The model "" keeps the names without a suffix (one model, as before).
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
from dataclasses import replace
from typing import Any, TypeVar, cast

import redis
import redis.asyncio as aioredis

from inference import fairshare
from inference.metrics import record_refusal
from inference.speed import PromptQueue, Slot, fill, shared_prompt_wait, worth_retelling
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
# A conversation's next turn is left to the worker that ran its last one (which keeps its KV,
# in a sequence or in host memory) for this many seconds after it was asked; then any worker
# takes it and computes the history again. About a step's wait for a holder with room; one
# that stays busy longer costs the turn that much more.
AFFINITY_SECONDS = 1.0
# A new request waits at most this long for a less loaded live worker before a busier one takes
# it: whichever worker polled first took everything it had room for, and with 16 users one
# worker ran 60 of 65 replies while the other idled (docs/BENCHMARKS.md, scale-out).
BALANCE_SECONDS = 0.25
HOLDER_TTL = 3600  # seconds a worker is remembered as holding a conversation
# What redis-py raises while Redis is down or restarting (both sides retry by themselves).
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
REDIS_DOWN_MESSAGE = (
    "The connection to the inference workers (Redis) was lost; try again in a few seconds."
)

_ENQUEUE = """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return -1 end
redis.call('SET', KEYS[2], ARGV[4], 'EX', tonumber(ARGV[5]))
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[6])
redis.call('LPUSH', KEYS[4], '1')
redis.call('LTRIM', KEYS[4], 0, 63)
return redis.call('ZRANK', KEYS[1], ARGV[3])
"""

# Claim a queued request for this worker and charge its tenant (fairshare.FairClock.charge).
_CLAIM = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[4] == '0' then
  local now = tonumber(redis.call('HGET', KEYS[3], 'now') or '0')
  local t = tonumber(redis.call('HGET', KEYS[3], 't:' .. ARGV[2]) or '0')
  local start = math.max(t, now)
  redis.call('HSET', KEYS[3], 'now', string.format('%.17g', start),
             't:' .. ARGV[2], string.format('%.17g', start + tonumber(ARGV[3])))
end
return 1
"""

# What the policy knows of the requests that have waited longest (the queue's score is arrival).
_OLDEST = """
local ids = redis.call('ZRANGE', KEYS[1], 0, 15)
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[2], unpack(ids))
"""

# Take a request out of the queue (cancel, wait bound) unless a worker claimed it already.
_UNQUEUE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
"""


class Keys:
    """Redis keys; those of the queue and of who serves it are per model."""

    def __init__(self, prefix: str, model: str = "") -> None:
        self.prefix = prefix
        self.model = model
        own = f":{model}" if model else ""
        self.queue = f"{prefix}:queue{own}"
        self.meta = f"{prefix}:meta{own}"
        self.fair = f"{prefix}:fair{own}"
        self.bell = f"{prefix}:bell{own}"
        self.cancel = f"{prefix}:cancel"
        self.workers = f"{prefix}:workers"  # every live worker, whatever its model
        self.live = f"{prefix}:workers{own}"  # the live workers of this model
        self.loads = f"{prefix}:loads{own}"  # worker id -> the requests it holds (last fetch)

    def body(self, request_id: str) -> str:
        return f"{self.prefix}:req:{request_id}"

    def events(self, request_id: str) -> str:
        return f"{self.prefix}:ev:{request_id}"

    def owner(self, request_id: str) -> str:
        return f"{self.prefix}:owner:{request_id}"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:worker:{worker_id}"

    def holder(self, conversation: str) -> str:
        """The worker that last ran this conversation, so holds its KV (or host copy)."""
        return f"{self.prefix}:conv:{conversation}"


def queue_meta(sub: Submission) -> str:
    """What the fair-share policy needs to know of a queued request."""
    return json.dumps(
        {
            "tenant": sub.tenant,
            "weight": fairshare.tenant_weight(sub.priority),
            "follow_up": any(m.role == "assistant" for m in sub.messages),
            "background": sub.background,
            "arrival": sub.submitted_at,
            "conversation": sub.conversation,
        }
    )


def fair_order(r: Any, keys: Keys, aging: float) -> list[fairshare.Entry]:
    """The shared queue in the order workers take it (sync client)."""
    pipe = r.pipeline(transaction=False)
    pipe.zrange(keys.queue, 0, -1)
    pipe.hgetall(keys.meta)
    pipe.hgetall(keys.fair)
    ids, meta, clock = pipe.execute()
    return _order(ids, meta, clock, aging)


def _order(
    ids: list[bytes], meta: dict[bytes, bytes], clock: dict[bytes, bytes], aging: float
) -> list[fairshare.Entry]:
    entries = []
    for raw_id in ids:
        raw = meta.get(raw_id)
        data = json.loads(raw) if raw else {}
        entries.append(
            fairshare.Entry(
                key=raw_id.decode(),
                tenant=str(data.get("tenant", "")),
                weight=float(data.get("weight", 1.0)),
                follow_up=bool(data.get("follow_up", False)),
                background=bool(data.get("background", False)),
                arrival=float(data.get("arrival", 0.0)),
            )
        )
    fair = fairshare.FairClock(
        times={k.decode()[2:]: float(v) for k, v in clock.items() if k.startswith(b"t:")},
        now=float(clock.get(b"now", b"0")),
    )
    return fairshare.order(entries, fair, time.time(), aging)


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

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "qassist",
        worker_id: str | None = None,
        aging: float = 30.0,
        affinity: float = AFFINITY_SECONDS,
        balance: float = BALANCE_SECONDS,
        heartbeat_timeout: float = 5.0,
        model: str = "",
    ) -> None:
        # Any: redis-py types replies as unions over its decode modes; this client returns bytes.
        self.redis: Any = cast(Any, redis.Redis.from_url(url))
        self.model = model
        self.keys = Keys(prefix, model)
        self.aging = aging
        self.affinity = affinity
        self.balance = balance
        self.heartbeat_timeout = heartbeat_timeout
        self._claim = self.redis.register_script(_CLAIM)
        self._oldest = self.redis.register_script(_OLDEST)
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self._pubsub.subscribe(self.keys.cancel)

    @_unavailable_when_redis_is_down
    def fetch(self, limit: int, timeout: float, load: int = 0) -> Sequence[Submission]:
        """Claim up to `limit` requests (blocking up to `timeout` for one). `load`: the requests
        this worker holds now (running and waiting): a busier worker leaves a new request to a
        less loaded one for `balance` seconds."""
        ids = self._claim_next(limit, load)
        if not ids and timeout > 0:
            if self.redis.blpop([self.keys.bell], timeout=timeout) is None:
                return []
            ids = self._claim_next(limit, load)
        if not ids:
            return []
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
        held = [s.conversation for s in subs if s.conversation]
        if held:
            # This worker now holds these conversations' KV: their next turns come here first.
            pipe = self.redis.pipeline(transaction=False)
            for conversation in held:
                pipe.set(self.keys.holder(conversation), self.worker_id, ex=HOLDER_TTL)
            pipe.execute()
        return subs

    def _claim_next(self, limit: int, load: int = 0) -> list[str]:
        """Claim up to `limit` queued requests in the fair order, leaving to another live
        worker, for `affinity` seconds after it was asked, a conversation's turn whose earlier
        turns that worker ran: it holds the history's KV, here it would be computed again.
        While another live worker holds fewer requests than this one, a request asked less
        than `balance` seconds ago is left to it too (unless this worker holds its
        conversation); past that, whoever polls takes it, so a stale load costs little."""
        claimed: list[str] = []
        lighter = self._lighter_worker_exists(load)
        if limit <= 0:
            return claimed
        order = fair_order(self.redis, self.keys, self.aging)
        elsewhere, mine = self._holders(order)
        now = time.time()
        for entry in order:
            if entry.key in elsewhere and now - entry.arrival < self.affinity:
                continue
            if lighter and entry.key not in mine and now - entry.arrival < self.balance:
                continue
            ok = self._claim(
                keys=[self.keys.queue, self.keys.meta, self.keys.fair],
                args=[entry.key, entry.tenant, 1.0 / entry.weight, int(entry.background)],
            )
            if ok:
                claimed.append(entry.key)
                if len(claimed) >= limit:
                    break
        return claimed

    def _lighter_worker_exists(self, load: int) -> bool:
        """Record this worker's load; whether another live worker holds fewer requests."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.loads, self.worker_id, load)
        pipe.hgetall(self.keys.loads)
        pipe.zrangebyscore(self.keys.live, time.time() - self.heartbeat_timeout, "+inf")
        _, loads, live_raw = pipe.execute()
        if self.balance <= 0 or load <= 0:
            return False
        live = {w.decode() for w in live_raw} - {self.worker_id}
        return any(int(n) < load for w, n in loads.items() if w.decode() in live)

    def _holders(self, order: Sequence[fairshare.Entry]) -> tuple[set[str], set[str]]:
        """The queued requests whose conversation another live worker holds, and those whose
        conversation this worker holds."""
        if self.affinity <= 0 or not order:
            return set(), set()
        keys = [e.key for e in order]
        raw_meta = self.redis.hmget(self.keys.meta, keys)
        conversations = {
            key: str(json.loads(raw).get("conversation") or "")
            for key, raw in zip(keys, raw_meta, strict=True)
            if raw
        }
        asked = {k: c for k, c in conversations.items() if c}
        if not asked:
            return set(), set()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrangebyscore(self.keys.live, time.time() - self.heartbeat_timeout, "+inf")
        pipe.mget([self.keys.holder(c) for c in asked.values()])
        live_raw, holders = pipe.execute()
        live = {w.decode() for w in live_raw} - {self.worker_id}
        held = {
            key: holder.decode()
            for key, holder in zip(asked, holders, strict=True)
            if holder is not None
        }
        elsewhere = {key for key, holder in held.items() if holder in live}
        mine = {key for key, holder in held.items() if holder == self.worker_id}
        return elsewhere, mine

    @_unavailable_when_redis_is_down
    def oldest_waiting(self) -> float | None:
        """When the oldest reply in the shared queue was asked (background work aside): every
        worker's speed floor yields for it once it has waited past the first-token target."""
        for raw in self._oldest(keys=[self.keys.queue, self.keys.meta]):
            data = json.loads(raw) if raw else {}
            if data and not data.get("background"):
                return float(data.get("arrival", time.time()))
        return None

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
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.zadd(self.keys.live, {self.worker_id: now})
        stats = {**stats, "model": self.model}
        pipe.set(self.keys.worker(self.worker_id), json.dumps(stats), ex=30)
        pipe.execute()

    def retire(self) -> None:
        """Leave the pool at once on a clean exit, rather than after the heartbeat goes stale."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers, self.worker_id)
        pipe.zrem(self.keys.live, self.worker_id)
        pipe.delete(self.keys.worker(self.worker_id))
        pipe.hdel(self.keys.loads, self.worker_id)
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
        max_wait: float | None = None,
        aging: float = 30.0,
        default_model: str = "",
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.default_model = default_model  # what a request naming no model gets
        self.keys = Keys(prefix, default_model)
        self._asked: dict[str, Keys] = {}  # request id -> its model's keys, while it runs
        self.max_queue = max_queue
        self.max_wait = max_wait
        self.aging = aging
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_ms = int(poll_seconds * 1000)
        self._redis: Any = None  # see RedisWorkerTransport.redis
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_redis: redis.Redis | None = None

    @property
    def redis(self) -> Any:
        # A connection pool belongs to one event loop; tests and sync callers make new loops.
        loop = asyncio.get_running_loop()
        if self._redis is None or self._loop is not loop:
            self._redis = aioredis.Redis.from_url(self.url)
            self._loop = loop
        return self._redis

    def keys_for(self, model: str) -> Keys:
        """The keys of `model`'s queue ("" is the default model's). A client given no default
        model knows no model names: one model, whatever a request names (as before #36)."""
        model = model or self.default_model
        if not self.default_model or model == self.keys.model:
            return self.keys
        return Keys(self.prefix, model)

    def at_capacity(self, model: str = "") -> bool:
        """Whether the model's shared queue is full now, asked synchronously before a request
        is stored (admission): then it is refused at once, without writing anything. Another
        web process can still fill the queue after this answer; the enqueue script then
        answers busy as before. Redis out of reach: not full (the enqueue path says what
        is wrong)."""
        if self._sync_redis is None:
            self._sync_redis = redis.Redis.from_url(self.url, socket_timeout=1.0)
        try:
            queued: Any = self._sync_redis.zcard(self.keys_for(model).queue)  # an int
            return int(queued) >= self.max_queue
        except redis.RedisError:
            return False

    async def live_workers(self, model: str | None = None) -> list[str]:
        """The live workers of `model` ("" the default's), or of every model (None)."""
        key = self.keys.workers if model is None else self.keys_for(model).live
        cutoff = time.time() - self.heartbeat_timeout
        members = await self.redis.zrangebyscore(key, cutoff, "+inf")
        return [m.decode() for m in members]

    async def served_models(self) -> list[str]:
        """The models live workers serve, as their heartbeats name them (sorted)."""
        live = await self.live_workers()
        raws = await self.redis.mget([self.keys.worker(w) for w in live]) if live else []
        models = set()
        for raw in raws:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                models.add(str(json.loads(raw).get("model", "")) if raw else "")
        models.discard("")  # a worker of a version before #36: its model is unknown
        return sorted(models)

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
        keys = self.keys_for(sub.model)
        self._asked[sub.request_id] = keys
        try:
            async for event in self._generate_on(sub, keys):
                yield event
        finally:
            self._asked.pop(sub.request_id, None)

    async def _generate_on(self, sub: Submission, keys: Keys) -> AsyncIterator[Event]:
        rid = sub.request_id
        model = keys.model
        if not await self.live_workers(model):
            if model and await self.live_workers():
                message = f"No inference worker serves the model '{model}'."
            else:
                message = "No inference worker is running."
            yield Failed(rid, ErrorCode.WORKER_DOWN.value, message)
            return
        body = json.dumps(replace(sub, model=model).to_dict(), ensure_ascii=False)
        rank = await self.redis.eval(
            _ENQUEUE,
            4,
            keys.queue,
            keys.body(rid),
            keys.meta,
            keys.bell,
            self.max_queue,
            int(sub.submitted_at * 1000),
            rid,
            body,
            EVENT_TTL,
            queue_meta(sub),
        )
        if int(rank) < 0:
            record_refusal(reason=ErrorCode.BUSY.value, tenant=sub.tenant)
            yield Failed(
                rid,
                ErrorCode.BUSY.value,
                "The assistant is at capacity; try again shortly.",
                retry_after=5.0,
            )
            return
        last_id = "0-0"
        position = 0  # told only if it is still waiting after a poll: most start at once
        told: float | None = None  # the estimated wait told with it
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
            live = await self.live_workers(model)
            rank = await self._position(rid, keys)
            if rank is not None:
                if not live and await self._unqueue(rid, keys):
                    yield Failed(
                        rid, ErrorCode.WORKER_DOWN.value, "No inference worker is running."
                    )
                    return
                waited = time.time() - sub.submitted_at
                if self.max_wait is not None and waited > self.max_wait:
                    if await self._unqueue(rid, keys):
                        record_refusal(reason="wait_bound", tenant=sub.tenant)
                        yield Failed(
                            rid,
                            ErrorCode.BUSY.value,
                            f"The assistant is busy: this request waited {self.max_wait:g} s "
                            "without starting; try again shortly.",
                            retry_after=5.0,
                        )
                        return
                    continue  # a worker claimed it just now: its events follow
                estimate = await self._estimate(rank, live)
                if rank + 1 != position or worth_retelling(told, estimate):
                    position, told = rank + 1, estimate
                    yield Queued(rid, position, estimate)
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

    async def _position(self, rid: str, keys: Keys) -> int | None:
        """The request's index in the fair order of its model's queue, None once claimed."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrange(keys.queue, 0, -1)
        pipe.hgetall(keys.meta)
        pipe.hgetall(keys.fair)
        ids, meta, clock = await pipe.execute()
        if rid.encode() not in ids:
            return None
        order = _order(ids, meta, clock, self.aging)
        return next(i for i, e in enumerate(order) if e.key == rid)

    async def _estimate(self, rank: int, live: list[str]) -> float | None:
        """Seconds until the request at `rank` of the shared queue is predicted to start: the
        live workers' sequences as their last heartbeats described them (`queue_slots`: when
        each frees for the shared queue, after the worker's own waiting requests), aged by the
        time since, taken in queue order (`inference.speed.fill`). None when no worker knows."""
        if not live:
            return None
        raws = await self.redis.mget([self.keys.worker(w) for w in live])
        now = time.time()
        slots: list[Slot] = []
        prompts: list[PromptQueue] = []
        for raw in raws:
            try:
                data = json.loads(raw) if raw else {}
                described, at = data.get("queue_slots"), float(data["status_time"])
                age = max(0.0, now - at)
                if isinstance(described, list):
                    slots += [(max(0.0, float(t) - age), float(hold)) for t, hold in described]
                queue = data.get("prompt_queue")
                if isinstance(queue, list) and len(queue) == 3:
                    free, seconds, tokens = (float(v) for v in queue)
                    prompts.append((max(0.0, free - age), seconds, tokens))
            except (KeyError, ValueError, TypeError, AttributeError):
                continue  # a worker of another version: its sequences are not counted
        starts = fill(slots, rank + 1)[0]
        start = starts[rank] if starts else None
        # Its first word also waits for its prompt and those ahead of it in this queue.
        prompt = shared_prompt_wait(rank, prompts)
        if start is None or prompt is None:
            return None if start is None else round(start, 1)
        return round(max(start, prompt), 1)

    async def _unqueue(self, rid: str, keys: Keys) -> bool:
        removed = await self.redis.eval(_UNQUEUE, 3, keys.queue, keys.meta, keys.body(rid), rid)
        return bool(removed)

    async def cancel(self, request_id: str) -> None:
        """Stop a request: still queued, it leaves the queue; running, its worker frees it."""
        if await self._unqueue(request_id, self._asked.get(request_id, self.keys)):
            event = Done(request_id, FinishReason.CANCELLED.value, 0, 0)
            key = self.keys.events(request_id)
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
        models = sorted({str(w.get("model", "")) for w in stats} - {""})
        queued = 0
        for model in models or [self.default_model]:
            queued += await self.redis.zcard(self.keys_for(model).queue)
        return {
            "mode": "redis",
            "ok": bool(live),
            "workers": stats,
            "models": models,
            "queued": queued,
        }
