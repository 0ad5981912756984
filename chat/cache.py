"""Matching questions to staff-curated cached replies, without the database on the hot path.

Every request passes through `cached_reply_lookup`, so the enabled replies live in an index in
each process: a dict from normalised question (chat/question_keys.py) to reply, per tenant. It
is rebuilt only when the cached-reply table changed, which every process learns through a
version:
- with Redis (REDIS_URL set): a counter in Redis, incremented after each committed save or
  delete; a lookup reads it (one Redis GET) and rebuilds when it moved;
- embedded (no Redis): a counter in this process, bumped by the same signals, plus a cheap
  signature of the table (row count and latest change) read at most every
  QASSIST_CACHED_REPLY_CHECK_SECONDS, for changes made by another process (a Celery worker, a
  management command).
Saves and deletes bump the version through model signals; code that changes rows with
`QuerySet.update()` or `bulk_create()` must call `cached_replies_changed()` itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max

from chat.question_keys import reply_keys

if TYPE_CHECKING:
    from chat.models import CachedReply

logger = logging.getLogger(__name__)


# --- the version every process compares ------------------------------------------------------


class VersionSource(Protocol):
    def current(self) -> object:
        """A value that changes whenever the table changed. Must not query the database
        more often than the embedded check interval."""
        ...

    def bump(self) -> None: ...


class RedisVersion:
    """A counter in Redis shared by every web process and Celery worker of the deployment."""

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self.key = f"{prefix}:cached_replies:version"
        self._failures = 0

    def current(self) -> object:
        try:
            return self._redis.get(self.key)
        except Exception:  # Redis away: never serve a stale answer, rebuild from the database
            logger.warning("cached replies: Redis unreachable, reading the table", exc_info=True)
            self._failures += 1
            return ("unreachable", self._failures)

    def bump(self) -> None:
        try:
            self._redis.incr(self.key)
        except Exception:
            logger.warning("cached replies: could not publish a change to Redis", exc_info=True)


class LocalVersion:
    """Embedded mode: other processes' changes seen within `check_seconds` (one small
    aggregate query, only when that long has passed); this process's own are seen at once
    through the index's local counter."""

    def __init__(self, check_seconds: float) -> None:
        self.check_seconds = check_seconds
        self._signature: object = None
        self._checked_at = float("-inf")

    def current(self) -> object:
        now = time.monotonic()
        if now - self._checked_at >= self.check_seconds:
            from chat.models import CachedReply

            self._signature = tuple(
                CachedReply.objects.aggregate(n=Count("id"), latest=Max("updated_at")).values()
            )
            self._checked_at = now
        return self._signature

    def bump(self) -> None:
        pass  # the others compare the table's signature


# --- the index -------------------------------------------------------------------------------


class CachedReplyIndex:
    def __init__(self, version: VersionSource) -> None:
        self.version = version
        self._lock = threading.Lock()
        self._loaded_version: object = object()  # never equal: the first lookup loads
        self._by_scope: dict[int | None, dict[str, CachedReply]] = {}
        self._local = 0  # this process's own changes
        self.loads = 0  # how many times the table was read (tests and /metrics)

    def lookup(self, *, tenant_id: int, key: str, now: datetime) -> CachedReply | None:
        """The tenant's own reply for `key` if one is in force, else the one for every tenant.
        The returned object is shared: read it, do not change it."""
        by_scope = self._fresh()
        for scope in (tenant_id, None):
            reply = by_scope.get(scope, {}).get(key)
            if reply is not None and (reply.expires_at is None or reply.expires_at > now):
                return reply
        return None

    def _fresh(self) -> dict[int | None, dict[str, CachedReply]]:
        version = (self._local, self.version.current())
        if version == self._loaded_version:
            return self._by_scope
        with self._lock:
            if version != self._loaded_version:
                # The version is read before the rows: a change committed meanwhile moves it
                # again, so the next lookup reloads rather than keeping stale rows.
                self._by_scope = _build(_enabled_replies())
                self._loaded_version = version
                self.loads += 1
            return self._by_scope

    def changed(self) -> None:
        """The table changed in this process: reload here at once (this transaction sees its
        own rows), and again and everywhere once the change is committed."""
        self._local += 1

        def committed() -> None:
            self._local += 1
            self.version.bump()

        transaction.on_commit(committed)


def _enabled_replies() -> Iterable[CachedReply]:
    from chat.models import CachedReply

    return CachedReply.objects.filter(enabled=True).order_by("id")


def _build(replies: Iterable[CachedReply]) -> dict[int | None, dict[str, CachedReply]]:
    by_scope: dict[int | None, dict[str, CachedReply]] = {}
    for reply in replies:
        scope = by_scope.setdefault(reply.tenant_id, {})
        for key in reply_keys(reply):
            scope.setdefault(key, reply)  # validation keeps keys unique; the oldest wins if not
    return by_scope


_index: CachedReplyIndex | None = None
_index_lock = threading.Lock()


def get_index() -> CachedReplyIndex:
    global _index
    with _index_lock:
        if _index is None:
            _index = CachedReplyIndex(_version_source())
        return _index


def reset_index() -> None:
    """Forget this process's index (tests; settings changed)."""
    global _index
    with _index_lock:
        _index = None


def _version_source() -> VersionSource:
    if settings.REDIS_URL:
        return RedisVersion(settings.REDIS_URL, settings.QASSIST_REDIS_PREFIX)
    return LocalVersion(float(settings.QASSIST_CACHED_REPLY_CHECK_SECONDS))


def cached_replies_changed(**_signal_kwargs: Any) -> None:
    """Tell every process that cached replies changed (connected to save and delete)."""
    get_index().changed()
